"""rlvr's vLLM worker extension: weight loading and broadcast inside each server worker.

A vLLM server started with ``--worker-extension-cls rlvr_vllm_worker.RlvrWorkerExtension`` (this
file's folder on its ``PYTHONPATH``) and ``VLLM_SERVER_DEV_MODE=1`` mixes this class into every
worker; rlvr calls its methods through ``POST /collective_rpc`` (``{"method": ..., "args":
[...]}``, JSON arguments). It imports only torch and safetensors, which every vLLM venv holds.

* ``rlvr_info``: the worker's rank, device, dtype, torch version (rlvr checks them on attach).
* ``rlvr_load_shards``: load safetensors files (``disk`` sync) through the model's own
  ``load_weights`` (HF names; fused projections handled by vLLM), inside vLLM's layerwise reload
  (``rlvr_begin_update`` / ``rlvr_finish_update``: the CPU backend repacks weights after
  loading, so a bare ``load_weights`` meets empty parameters).
* ``rlvr_init_group`` / ``rlvr_receive`` / ``rlvr_destroy_group``: join a process group with the
  trainer as rank 0 (the same layout as sglang's ``init_custom_process_group``: a TCPStore at
  the trainer, ``PrefixStore(group_name)``, torch's ``_new_process_group_helper``; gloo on CPU,
  NCCL on GPU) and receive broadcast buckets between ``rlvr_begin_update`` and
  ``rlvr_finish_update``, loaded like the shards.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class RlvrWorkerExtension:
    """Methods mixed into each vLLM worker (``self`` is the worker)."""

    model_runner: Any
    device: Any
    rank: int
    _rlvr_group: Any = None

    def _rlvr_model(self) -> Any:
        runner = self.model_runner
        return runner.get_model() if hasattr(runner, "get_model") else runner.model

    def _rlvr_device(self) -> torch.device:
        device = getattr(self, "device", None)
        return torch.device(device) if device is not None else torch.device("cpu")

    def rlvr_info(self) -> dict[str, Any]:
        """This worker's rank, device type, physical GPU id, dtype, torch and NCCL versions."""
        import os

        param = next(self._rlvr_model().parameters())
        if param.device.type == "meta":
            raise RuntimeError("the model is mid-update (rlvr_begin_update without finish)")
        gpu, nccl = None, None
        if param.device.type == "cuda":
            index = param.device.index or 0
            visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
                       if v.strip()]
            gpu = int(visible[index]) if index < len(visible) and visible[index].isdigit() \
                else index
            v = torch.cuda.nccl.version()
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        return {"rank": int(getattr(self, "rank", 0)), "device": param.device.type, "gpu": gpu,
                "dtype": str(param.dtype).removeprefix("torch."), "torch": str(torch.__version__),
                "nccl": nccl}

    def rlvr_begin_update(self) -> bool:
        """Start an update: vLLM's layerwise reload restores each layer's checkpoint layout.

        A CPU or quantized model repacks weights after loading (a plain ``load_weights`` then
        meets empty parameters); the reload takes checkpoint tensors and processes each layer
        again once all of its tensors arrived (``rlvr_finish_update`` completes the rest).
        """
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self._rlvr_model())
        return True

    def rlvr_finish_update(self) -> bool:
        """Finish the update ``rlvr_begin_update`` started."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self._rlvr_model(), self.model_runner.model_config)
        return True

    def _rlvr_load(self, pairs: list[tuple[str, torch.Tensor]]) -> int:
        """``load_weights(pairs)``; a tied model's ``lm_head.weight`` given the embedding's.

        A checkpoint of a model with tied embeddings leaves ``lm_head.weight`` out, and vLLM's
        layerwise reload then puts the old head back (it shares the embedding's tensor in the
        module but is its own layer there).
        """
        hf_config = getattr(self.model_runner.model_config, "hf_config", None)
        names = {n for n, _ in pairs}
        if getattr(hf_config, "tie_word_embeddings", False) and "lm_head.weight" not in names:
            pairs = pairs + [("lm_head.weight", t) for n, t in pairs
                             if n.endswith("embed_tokens.weight")]
        self._rlvr_model().load_weights(weights=pairs)
        return len(names)

    def rlvr_load_shards(self, paths: list[str]) -> int:
        """Load every tensor of the safetensors files ``paths`` as one update (a count)."""
        from safetensors.torch import load_file

        self.rlvr_begin_update()
        count = 0
        for path in paths:
            count += self._rlvr_load(list(load_file(path, device="cpu").items()))
        self.rlvr_finish_update()
        return count

    def rlvr_init_group(self, master_address: str, master_port: int, rank_offset: int,
                        world_size: int, group_name: str, backend: str) -> int:
        """Join the trainer's weight group as rank ``rank_offset + this worker's rank``."""
        from torch.distributed import distributed_c10d as c10d

        rank = rank_offset + int(getattr(self, "rank", 0))
        timeout = timedelta(minutes=10)
        tcp = torch.distributed.TCPStore(master_address, int(master_port), int(world_size),
                                         is_master=False, timeout=timeout)
        store = c10d.PrefixStore(group_name, tcp)
        pg, _ = c10d._new_process_group_helper(
            int(world_size), rank, [], backend, store, group_name=c10d.GroupName(group_name),
            timeout=timeout)
        c10d._world.pg_group_ranks[pg] = {i: i for i in range(int(world_size))}
        self._rlvr_group = pg
        return rank

    def rlvr_receive(self, names: list[str], dtypes: list[str], shapes: list[list[int]]) -> int:
        """Receive one broadcast bucket (the trainer sends the tensors in this order); load it."""
        if self._rlvr_group is None:
            raise RuntimeError("rlvr_receive before rlvr_init_group")
        device = self._rlvr_device()  # not a parameter's: between begin and finish they are meta
        received = []
        for name, dtype, shape in zip(names, dtypes, shapes, strict=True):
            tensor = torch.empty(shape, dtype=_DTYPES[dtype], device=device)
            torch.distributed.broadcast(tensor, src=0, group=self._rlvr_group)
            received.append((name, tensor))
        return self._rlvr_load(received)

    def rlvr_destroy_group(self) -> bool:
        """Leave the weight group (a no-op without one)."""
        if self._rlvr_group is None:
            return False
        torch.distributed.destroy_process_group(self._rlvr_group)
        self._rlvr_group = None
        return True
