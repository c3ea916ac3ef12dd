"""The SGLang rollout engine (``SGLangEngine``) and its parts; importing it needs no sglang."""

from __future__ import annotations

from rlvr.agents.sglang.engine import SGLangEngine
from rlvr.agents.sglang.options import SGLangOptions
from rlvr.agents.sglang.server_info import ServerInfo
from rlvr.agents.sglang.weights import WeightGroup, buckets, sglang_layout_group
from rlvr.agents.sglang.wire import parse_generate_response, sampling_payload

__all__ = [
    "SGLangEngine",
    "SGLangOptions",
    "ServerInfo",
    "WeightGroup",
    "buckets",
    "parse_generate_response",
    "sampling_payload",
    "sglang_layout_group",
]
