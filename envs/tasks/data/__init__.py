"""Bundled task files (JSON lines): code tasks with tests, fictional facts, word problems."""
