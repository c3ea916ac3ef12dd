"""Shared pytest set-up."""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
