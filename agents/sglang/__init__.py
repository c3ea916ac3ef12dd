"""The SGLang rollout engine, the servers it talks to, and its parts; importing needs no sglang.

``SGLangEngine`` talks to a ``ServerFleet`` (attached by URL, or from ``launch_fleet``).
"""

from __future__ import annotations

from rlvr.agents.sglang.engine import SGLangEngine
from rlvr.agents.sglang.fleet import LaunchSpec, ServerFleet, launch_fleet
from rlvr.agents.sglang.options import SGLangOptions
from rlvr.agents.sglang.server_info import ServerInfo
from rlvr.agents.sglang.weights import WeightGroup, buckets, sglang_layout_group
from rlvr.agents.sglang.wire import parse_generate_response, sampling_payload

__all__ = [
    "LaunchSpec",
    "SGLangEngine",
    "SGLangOptions",
    "ServerFleet",
    "ServerInfo",
    "WeightGroup",
    "buckets",
    "launch_fleet",
    "parse_generate_response",
    "sampling_payload",
    "sglang_layout_group",
]
