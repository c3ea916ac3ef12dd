"""Other clients on an episode's endpoint: an Anthropic client from the agent's OpenAI client.

An agent function gets an ``openai.AsyncOpenAI`` pointed at its episode. ``anthropic_client``
gives an ``anthropic.AsyncAnthropic`` on the same episode and the same HTTP connection (in
training, the gateway's in-process transport), so a Messages API agent is captured like any other.
"""

from __future__ import annotations

from typing import Any

from rlvr.agents.errors import MissingDependencyError


def anthropic_client(client: Any) -> Any:
    """An ``anthropic.AsyncAnthropic`` on the episode endpoint of ``client`` (an AsyncOpenAI).

    Raises:
        MissingDependencyError: the ``anthropic`` package is not installed.
    """
    try:
        import anthropic
    except ImportError as exc:
        raise MissingDependencyError("an Anthropic client needs anthropic: "
                                     "pip install anthropic") from exc
    import anthropic._base_client as theirs

    http = client._client
    libs = [getattr(theirs, n) for n in ("httpx2", "httpx") if getattr(theirs, n, None)]
    if not any(isinstance(http, lib.AsyncClient) for lib in libs):
        raise MissingDependencyError(
            f"the installed anthropic ({anthropic.__version__}) and openai clients use different "
            "HTTP libraries (httpx2 / httpx): install versions that agree (anthropic>=2 with "
            "openai>=3)")
    base = str(client.base_url).rstrip("/").removesuffix("/v1")
    return anthropic.AsyncAnthropic(base_url=base, api_key=client.api_key or "rlvr",
                                    http_client=http, timeout=client.timeout,
                                    max_retries=0)
