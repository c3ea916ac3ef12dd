"""Compatibility path: the SGLang engine lives in the ``agents.sglang`` package."""

from __future__ import annotations

from agents.sglang import (
    SGLangEngine,
    parse_generate_response,
    sampling_payload,
    sglang_layout_group,
)

sglang_group_factory = sglang_layout_group
"""The trainer's end of the weight-update group with sglang's store layout."""

__all__ = ["SGLangEngine", "parse_generate_response", "sampling_payload", "sglang_group_factory"]
