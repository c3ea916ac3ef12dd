"""What runs inside a vLLM server: rlvr's worker extension (``rlvr_vllm_worker``).

This folder goes on the server's ``PYTHONPATH`` (``extension_dir``), so the module is imported
there by its own name, without rlvr (the server's venv does not hold it).
"""

from __future__ import annotations

from pathlib import Path

EXTENSION_CLS = "rlvr_vllm_worker.RlvrWorkerExtension"
"""The ``--worker-extension-cls`` value that names rlvr's extension."""


def extension_dir() -> Path:
    """The folder to put on a vLLM server's ``PYTHONPATH`` (it holds ``rlvr_vllm_worker.py``)."""
    return Path(__file__).resolve().parent
