"""The HTTP client library the installed ``openai`` package uses (``httpx2`` or ``httpx``).

openai 3.x is built on ``httpx2`` (the module of the same name); openai 1.x and 2.x on ``httpx``.
An ``http_client`` handed to ``openai.AsyncOpenAI`` must come from the one it uses.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rlvr.agents.errors import MissingDependencyError


def http_client_module() -> ModuleType:
    """``httpx2`` when the installed openai imports it, else ``httpx``.

    Raises:
        MissingDependencyError: neither is installed.
    """
    import openai._base_client as base

    for name in ("httpx2", "httpx"):
        if getattr(base, name, None) is not None:
            return importlib.import_module(name)
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise MissingDependencyError("the gateway needs httpx: pip install 'rlvr[gateway]'")
