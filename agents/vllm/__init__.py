"""The vLLM rollout engine and its parts; importing needs no vLLM.

``VLLMEngine`` talks to vLLM servers (attached by URL, or launched with ``VLLMEngine.launch``)
through their OpenAI-compatible API and rlvr's worker extension (``server_side``).
"""

from __future__ import annotations

from rlvr.agents.vllm.engine import VLLMEngine
from rlvr.agents.vllm.launch import VLLMLaunch
from rlvr.agents.vllm.options import VLLMOptions

__all__ = ["VLLMEngine", "VLLMLaunch", "VLLMOptions"]
