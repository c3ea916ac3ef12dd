"""glibc malloc tuning by a CPU TransformersEngine: mid-sized buffers stay in the heap."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlvr.agents.hf.malloc_tuning import tune_malloc

PROBE = """
import ctypes, json
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM
from rlvr.agents.hf.engine import TransformersEngine

TransformersEngine(Qwen2ForCausalLM(Qwen2Config(
    vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
    num_attention_heads=2, num_key_value_heads=1))).close()  # on the CPU: tunes malloc

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]

libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
before = libc.mallinfo2().hblks
blocks = [libc.malloc(8 << 20) for _ in range(4)]   # 4 x 8 MiB, like a forward's big buffers
mapped = libc.mallinfo2().hblks - before            # how many got their own mmap
for block in blocks:
    libc.free(block)
print(json.dumps({"mapped": mapped, "kept_free_mib": libc.mallinfo2().fordblks >> 20}))
"""


def _probe(**env: str) -> dict[str, int]:
    clean = {k: v for k, v in os.environ.items()
             if k != "GLIBC_TUNABLES" and not (k.startswith("MALLOC_") and k.endswith("_"))}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_mid_sized_buffers_come_from_the_heap_and_stay_there_once_freed():
    """Untuned, each new 8 MiB buffer is its own mmap (unmapped on free: its pages are faulted
    and zeroed afresh on the next allocation); once a CPU engine was made, they come from the
    heap and their 32 MiB stay there, free, for the next ones."""
    untuned = _probe(RLVR_MALLOC_TUNING="0")
    assert untuned["mapped"] >= 1, untuned
    tuned = _probe()
    assert tuned["mapped"] == 0 and tuned["kept_free_mib"] >= 32, tuned


def test_it_leaves_malloc_alone_when_asked_or_tuned_by_the_user(monkeypatch):
    monkeypatch.setenv("RLVR_MALLOC_TUNING", "0")
    assert tune_malloc() is False
    monkeypatch.delenv("RLVR_MALLOC_TUNING")
    monkeypatch.setenv("MALLOC_ARENA_MAX_", "2")
    assert tune_malloc() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert tune_malloc() is False
