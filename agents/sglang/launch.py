"""Starting ``python -m sglang.launch_server``: the command line and environment, by device.

Defaults that work on the server's device (``docs/engines.md``, "SGLang on CPU", for the CPU facts):

* CUDA: ``--enable-memory-saver`` (release/resume GPU memory around training) and
  ``--enable-fp32-lm-head`` (logits in float32, as the learner computes them: bf16 logits alone
  move token logprobs by a few hundredths). No ``--enable-weights-cpu-backup``: the trainer
  re-pushes the weights after every release, so a host copy of them would only cost memory and
  time.
* CPU: ``SGLANG_USE_CPU_ENGINE=1``, ``--device cpu --attention-backend torch_native
  --dtype float32`` (sglang's default runs a float32 checkpoint in float16: logprobs then differ
  by ~1e-2), ``--sleep-on-idle`` (an idle scheduler spins a core otherwise),
  ``--max-total-tokens 65536`` (the KV pool takes 4.2 GB otherwise),
  ``--disable-overlap-schedule`` (``/flush_cache`` right after a request returns 400 otherwise)
  and ``--mem-fraction-static 0.2``. No memory saver (it needs ``libcuda``).
* Seeded sampling needs ``--enable-deterministic-inference`` (``deterministic=True``); sglang
  refuses it with ``torch_native`` attention, so not on CPU.
* ``SGLANG_RETURN_ORIGINAL_LOGPROB`` is removed from the server's environment: it would make the
  reported logprobs un-tempered, against ``rlvr.agents.engine``'s convention.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from os import PathLike

CPU_FLAGS = ("--device", "cpu", "--attention-backend", "torch_native", "--dtype", "float32",
             "--sleep-on-idle", "--max-total-tokens", "65536", "--disable-overlap-schedule",
             "--mem-fraction-static", "0.2")
CUDA_FLAGS = ("--enable-memory-saver", "--enable-fp32-lm-head")
SCRUBBED_ENV = ("SGLANG_RETURN_ORIGINAL_LOGPROB",)
PYTHON_ENV = "RLVR_SGLANG_PYTHON"


def default_device() -> str:
    """``cuda`` when this machine has an NVIDIA driver or CUDA torch, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() or shutil.which("nvidia-smi") else "cpu"


def server_python(python: str | PathLike[str] | None = None) -> str:
    """The interpreter for the server: ``python``, else ``$RLVR_SGLANG_PYTHON``, else this one."""
    return str(python or os.environ.get(PYTHON_ENV) or sys.executable)


def launch_command(
    model_path: str | PathLike[str],
    *,
    python: str,
    host: str,
    port: int,
    device: str,
    tp_size: int = 1,
    api_key: str | None = None,
    deterministic: bool = False,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The ``launch_server`` argv for ``device`` (``extra_args`` last, so they can override)."""
    cmd = [python, "-m", "sglang.launch_server", "--model-path", str(model_path),
           "--host", host, "--port", str(port), "--tp-size", str(tp_size)]
    cmd += list(CPU_FLAGS if device == "cpu" else CUDA_FLAGS)
    if deterministic:
        cmd.append("--enable-deterministic-inference")
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd + list(extra_args)


def launch_env(device: str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ours) minus the logprob-flipping variable.

    On CPU it adds ``SGLANG_USE_CPU_ENGINE=1``.
    """
    env = dict(os.environ if base is None else base)
    for name in SCRUBBED_ENV:
        env.pop(name, None)
    if device == "cpu":
        env["SGLANG_USE_CPU_ENGINE"] = "1"
    return env
