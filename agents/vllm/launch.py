"""Launching vLLM servers: the command line and environment by device, started and waited for.

Defaults that work (``docs/engines.md``, "vLLM", for the facts behind them):

* Every server: ``VLLM_SERVER_DEV_MODE=1`` (``/collective_rpc``, ``/server_info``,
  ``/reset_prefix_cache``, ``/sleep``, ``/pause`` answer 404 without it), rlvr's worker
  extension (``--worker-extension-cls``, its folder on ``PYTHONPATH``: weight loading and
  broadcast), ``--logprobs-mode processed_logprobs`` (the sampled token's logprob under the
  temperature, ``rlvr.agents.engine``'s convention; vLLM's default reports untempered ones),
  ``--enable-scale-out`` (the token-in/token-out ``/inference/v1/generate`` route, whose answers
  carry each token's weight version) and ``--seed 0``.
* CPU: ``--dtype float32`` (as the learner computes), ``--enforce-eager`` (no torch.compile
  warm-up: 52 s of a tiny model's start-up on 2 cores), ``--no-enable-chunked-prefill`` (a
  seeded request whose prefill is split rewinds its sampling generator, which a CPU generator
  cannot: vLLM 0.32's engine core dies with "CPU Generator does not use offset"),
  ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB of KV cache), ``VLLM_CPU_OMP_THREADS_BIND=nobind`` (no core
  pinning on a shared machine).
* The server is started as ``python -m vllm.entrypoints.openai.api_server``: vllm-cpu's ``vllm``
  console script looks up a distribution named ``vllm`` and fails.
* With a LoRA policy: ``--enable-lora --max-lora-rank R`` and
  ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` (``/v1/load_lora_adapter``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path

from rlvr.agents.errors import MissingDependencyError, VLLMError
from rlvr.agents.sglang.client import ServerClient
from rlvr.agents.sglang.server_process import ServerProcess, default_device, free_port
from rlvr.agents.vllm.server_side import EXTENSION_CLS, extension_dir

PYTHON_ENV = "RLVR_VLLM_PYTHON"
CPU_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


def server_python(python: str | PathLike[str] | None = None) -> str:
    """The interpreter for the server: ``python``, else ``$RLVR_VLLM_PYTHON``, else this one."""
    return str(python or os.environ.get(PYTHON_ENV) or sys.executable)


def launch_command(model_path: str | PathLike[str], *, python: str, host: str, port: int,
                   device: str, api_key: str | None = None,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """The ``api_server`` argv for ``device`` (``extra_args`` last, so they can override)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_path),
           "--host", host, "--port", str(port), "--seed", "0",
           "--logprobs-mode", "processed_logprobs", "--enable-scale-out",
           "--worker-extension-cls", EXTENSION_CLS]
    if device == "cpu":
        cmd += ["--dtype", "float32", "--enforce-eager", "--no-enable-chunked-prefill"]
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd + list(extra_args)


def launch_env(device: str, *, lora: bool = False,
               base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default ours) with dev mode and the extension's path."""
    env = dict(os.environ if base is None else base)
    env["VLLM_SERVER_DEV_MODE"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(
        [str(extension_dir())] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    if device == "cpu":
        for name, value in CPU_ENV.items():
            env.setdefault(name, value)
    return env


@dataclass(frozen=True, kw_only=True)
class VLLMLaunch:
    """How to start vLLM servers.

    Attributes:
        python: the servers' interpreter (default ``$RLVR_VLLM_PYTHON``, else this one).
        device: "cuda" or "cpu" (default: cuda when this machine has one).
        host: where the servers listen.
        servers: how many to start (each on a free port).
        api_key: the servers' ``--api-key``.
        extra_args: more ``api_server`` flags (last, so they override the defaults).
        lora_rank: serve LoRA adapters up to this rank (None: no LoRA).
        startup_timeout_s: how long ``/health`` may take to answer 200.
        log_dir: where the servers' logs go (default: a temporary folder).
    """

    python: str | None = None
    device: str | None = None
    host: str = "127.0.0.1"
    servers: int = 1
    api_key: str | None = None
    extra_args: Sequence[str] = ()
    lora_rank: int | None = None
    startup_timeout_s: float = 900.0
    log_dir: str | PathLike[str] | None = None


def launch_servers(model_path: str | PathLike[str], spec: VLLMLaunch
                   ) -> tuple[list[str], list[ServerProcess]]:
    """Start ``spec.servers`` servers on ``model_path``; their URLs and processes, all healthy.

    Raises:
        MissingDependencyError: vllm is not installed for the interpreter.
        VLLMError: a server exited or was not healthy within ``startup_timeout_s`` (the
            message ends with its log's tail).
    """
    exe = server_python(spec.python)
    if exe == sys.executable and importlib.util.find_spec("vllm") is None:
        raise MissingDependencyError(
            "the vllm engine launches `python -m vllm.entrypoints.openai.api_server`: point "
            "$RLVR_VLLM_PYTHON (or rollout.vllm.python) at a venv with vLLM (bash dev.sh "
            "setup-vllm builds a CPU one), or attach to a running server with rollout.vllm.url")
    if not Path(exe).exists():
        raise MissingDependencyError(f"the vllm server's python {exe!r} does not exist")
    device = spec.device or default_device()
    extra = list(spec.extra_args)
    if spec.lora_rank is not None:
        extra = ["--enable-lora", "--max-lora-rank", str(spec.lora_rank)] + extra
    log_dir = Path(spec.log_dir) if spec.log_dir else None
    urls, procs = [], []
    try:
        for i in range(spec.servers):
            port = free_port(spec.host)
            argv = launch_command(model_path, python=exe, host=spec.host, port=port,
                                  device=device, api_key=spec.api_key, extra_args=extra)
            log = log_dir / f"vllm-{i}.log" if log_dir else None
            procs.append(ServerProcess.start(argv, env=launch_env(
                device, lora=spec.lora_rank is not None), log_path=log))
            urls.append(f"http://{spec.host}:{port}")
        for url, proc in zip(urls, procs):
            wait_healthy(url, proc, spec.startup_timeout_s, api_key=spec.api_key)
    except BaseException:
        stop_servers(procs)
        raise
    return urls, procs


def wait_healthy(url: str, proc: ServerProcess | None, timeout_s: float, *,
                 api_key: str | None = None) -> None:
    """Block until ``url`` answers ``GET /health`` with 200.

    Raises:
        VLLMError: the process exited, or ``timeout_s`` passed.
    """
    client = ServerClient(url, api_key=api_key)
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None and (code := proc.exit_code()) is not None:
            raise VLLMError(f"vllm server exited with {code}" + proc.tail())
        try:
            client.get("/health", timeout_s=10)
            return
        except Exception:  # noqa: BLE001 - not up yet: connection refused, 503
            pass
        if time.monotonic() > deadline:
            raise VLLMError(f"{url}/health not ready after {timeout_s}s"
                            + (proc.tail() if proc else ""))
        time.sleep(1.0)


def stop_servers(procs: Sequence[ServerProcess]) -> None:
    """Stop ``procs`` (SIGTERM all, then wait for each; their children are killed)."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.stop()
