"""The engine's worker decodes on its own intra-op thread count; the other threads keep theirs."""

from __future__ import annotations

import asyncio
import re
import threading

import pytest
import torch

from rlvr.agents.engine import SamplingParams
from rlvr.agents.engine_registry import EngineRequest, build_engine
from rlvr.agents.errors import EngineConfigError, RequestError
from rlvr.agents.hf.engine import TransformersEngine
from rlvr.agents.hf.intra_op import openmp_backend, use_intra_op_threads
from rlvr.agents.hf.options import TransformersOptions

needs_openmp = pytest.mark.skipif(not openmp_backend(), reason="per-thread counts need OpenMP")


def _in_new_thread(fn):
    out = []
    thread = threading.Thread(target=lambda: out.append(fn()))
    thread.start()
    thread.join()
    return out[0]


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@needs_openmp
def test_the_caller_gets_its_count_and_the_process_keeps_its_own(two_threads):
    def worker():
        assert use_intra_op_threads(1)
        return torch.get_num_threads(), _in_new_thread(torch.get_num_threads)

    mine, started_after = _in_new_thread(worker)
    assert mine == 1
    assert torch.get_num_threads() == 2      # the thread that would train
    assert started_after == 2                # threads started later get the process's count
    assert _in_new_thread(torch.get_num_threads) == 2


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_bad_count_is_refused(bad):
    with pytest.raises(ValueError, match="threads must be an int >= 1"):
        use_intra_op_threads(bad)
    with pytest.raises(RequestError, match="threads must be None or an int >= 1"):
        TransformersEngine(torch.nn.Linear(2, 2), threads=bad)
    message = rf"^threads must be (an integer|>= 1) or null; got {re.escape(repr(bad))}$"
    with pytest.raises(EngineConfigError, match=message):
        TransformersOptions(threads=bad)


@needs_openmp
def test_the_engine_forwards_on_its_threads_and_the_caller_keeps_two(
    two_threads, tiny_model_path, tiny_tokenizer
):
    built = build_engine(EngineRequest(engine="transformers", model_path=tiny_model_path,
                                       tokenizer=tiny_tokenizer,
                                       options=TransformersOptions(threads=1)))
    engine = built.engine
    seen: list[int] = []
    decode = engine._scheduler.decode_step

    def counting(batch):
        seen.append(torch.get_num_threads())
        return decode(batch)

    engine._scheduler.decode_step = counting
    try:
        params = SamplingParams(max_new_tokens=4, seed=0)

        async def go():
            return await asyncio.gather(*[engine.generate([5, 6, 7], params) for _ in range(3)])

        outs = asyncio.run(go())
    finally:
        engine.close()
    assert all(len(o.token_ids) >= 1 for o in outs)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2
