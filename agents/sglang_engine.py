"""SGLangEngine: the rollout engine over SGLang servers' native HTTP API (GPU clusters).

Talks to ``python -m sglang.launch_server`` processes (launched here with ``launch``, or
attached to by URL) with the standard library only (``urllib`` in a thread pool), so importing
this module needs neither sglang nor any HTTP package. The wire format is the one described in
``reference/sglang-http-api.md`` (sglang 0.5.23):

* ``generate`` POSTs ``/generate`` with ``input_ids``, ``sampling_params`` (``sampling_seed``,
  not ``seed``; ``no_stop_trim`` so nothing generated is cut), ``return_logprob: true`` and
  ``logprob_start_len: -1``, and reads ``output_ids`` and ``meta_info.output_token_logprobs``.
  SGLang's default logprobs are ``log_softmax(logits / T)`` at the sampled token, before
  top-p/top-k renormalisation: the convention of ``agents.engine``.
* Several servers: ``urls`` are used round-robin for ``/generate`` (give one sglang-router URL to
  let the router balance with prefix-cache affinity); weight, memory and cache calls go to every
  server in ``server_urls`` (default: ``urls``), never to a router.
* Weights: ``update_weights(path)`` POSTs ``/update_weights_from_disk`` (a HF directory the
  learner saved; needs a filesystem the servers see). ``update_weights(named_tensors)`` uses the
  NCCL path: call ``init_weight_update_group`` once, then each update POSTs
  ``/update_weights_from_distributed`` (names, dtypes, shapes) to every server while this process
  broadcasts the tensors, in order, from rank 0 of that group.
* Memory: ``release_memory`` / ``resume_memory`` POST ``/release_memory_occupation`` /
  ``/resume_memory_occupation`` (servers launched with ``--enable-memory-saver``) around training;
  ``flush_cache`` POSTs ``/flush_cache``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import itertools
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from os import PathLike
from pathlib import Path
from typing import Any, Protocol

import torch

from agents.engine import Completion, SamplingParams, WeightsSource
from agents.errors import EngineClosedError, MissingDependencyError, RequestError, SGLangError

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


class WeightGroup(Protocol):
    """The trainer's end (rank 0) of the weight-update process group."""

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Send ``tensor`` from rank 0 to every other rank of the group."""
        ...


GroupFactory = Callable[..., WeightGroup]
"""``factory(backend=, init_method=, world_size=, rank=0, group_name=) -> WeightGroup``."""


class _TorchGroup:
    def __init__(self, group: Any) -> None:
        self.group = group

    def broadcast(self, tensor: torch.Tensor) -> None:
        torch.distributed.broadcast(tensor, src=0, group=self.group)


def sglang_group_factory(**kwargs: Any) -> WeightGroup:
    """The trainer's end of the group, made with sglang's own helper (same store layout).

    Raises:
        MissingDependencyError: sglang is not installed in this process.
    """
    try:
        from sglang.srt.utils import init_custom_process_group
    except ImportError as exc:
        raise MissingDependencyError(
            "the NCCL weight-update path needs sglang in the trainer process too "
            "(pip install 'rlvr[sglang]'), or pass group_factory=..."
        ) from exc
    return _TorchGroup(init_custom_process_group(**kwargs))


def sampling_payload(sampling: SamplingParams) -> dict[str, Any]:
    """SGLang's ``sampling_params`` for ``sampling`` (only keys sglang accepts)."""
    out: dict[str, Any] = {
        "max_new_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "no_stop_trim": True,
        "skip_special_tokens": False,
    }
    if sampling.stop_token_ids:
        out["stop_token_ids"] = list(sampling.stop_token_ids)
    if sampling.stop:
        out["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        out["sampling_seed"] = sampling.seed
    return out


def parse_generate_response(body: dict[str, Any]) -> Completion:
    """A ``Completion`` from a ``/generate`` response.

    Raises:
        SGLangError: fields are missing or the logprobs are not aligned with ``output_ids``.
    """
    try:
        ids = [int(t) for t in body["output_ids"]]
        meta = body["meta_info"]
        entries = meta["output_token_logprobs"]
        finish = meta.get("finish_reason") or {"type": "abort"}
    except (KeyError, TypeError, ValueError) as exc:
        raise SGLangError(f"/generate answered without {exc}; got keys {sorted(body)}") from None
    if len(entries) != len(ids) or any(int(e[1]) != t for e, t in zip(entries, ids)):
        raise SGLangError(
            f"/generate: output_token_logprobs ({len(entries)} entries) are not aligned with "
            f"output_ids ({len(ids)} ids)"
        )
    kind = finish.get("type") if isinstance(finish, dict) else str(finish)
    reason = _FINISH.get(str(kind), "abort")
    if any(e[0] is None for e in entries):
        raise SGLangError("/generate returned a null logprob; logprob_start_len must be -1")
    logprobs = [float(e[0]) for e in entries]
    return Completion(ids, logprobs, reason, {"meta_info": meta})  # type: ignore[arg-type]


class SGLangEngine:
    """A rollout engine over one or more SGLang servers.

    Args:
        urls: where ``/generate`` goes: one server, one sglang-router, or several servers
            (round-robin).
        server_urls: the servers themselves, for weight/memory/cache calls (default ``urls``).
        tp_size: tensor-parallel size of each server (ranks in the weight-update group).
        request_timeout_s: HTTP timeout of one request.
        max_concurrency: requests in flight at once (threads of the HTTP pool).
        process: a server process this engine owns (``launch`` sets it); ``close`` stops it.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        server_urls: Sequence[str] | None = None,
        tp_size: int = 1,
        request_timeout_s: float = 600.0,
        max_concurrency: int = 256,
        process: subprocess.Popen[bytes] | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise RequestError("SGLangEngine needs at least one URL in urls")
        self.server_urls = list(server_urls) if server_urls else list(self.urls)
        self.tp_size = tp_size
        self.request_timeout_s = request_timeout_s
        self.process = process
        self._next_url = itertools.cycle(self.urls)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_concurrency, "sglang-http")
        self._group: WeightGroup | None = None
        self._group_name = "weight_update_group"
        self._closed = False

    # ------------------------------------------------------------------ launching
    @classmethod
    def launch(
        cls,
        model_path: str | PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tp_size: int = 1,
        mem_fraction_static: float | None = None,
        enable_memory_saver: bool = True,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 900.0,
        log_path: str | PathLike[str] | None = None,
    ) -> SGLangEngine:
        """Start ``python -m sglang.launch_server`` on ``model_path`` and wait for ``/health``.

        Raises:
            MissingDependencyError: sglang is not installed.
            SGLangError: the server exited or was not healthy within ``startup_timeout_s``
                (the message ends with the server log's tail).
        """
        if importlib.util.find_spec("sglang") is None:
            raise MissingDependencyError(
                "SGLangEngine.launch needs sglang (a CUDA machine): pip install 'rlvr[sglang]'; "
                "or attach to running servers with SGLangEngine(urls)"
            )
        port = port or _free_port(host)
        cmd = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(model_path),
               "--host", host, "--port", str(port), "--tp-size", str(tp_size)]
        if mem_fraction_static is not None:
            cmd += ["--mem-fraction-static", str(mem_fraction_static)]
        if enable_memory_saver:
            cmd.append("--enable-memory-saver")
        cmd += list(extra_args)
        log = Path(log_path) if log_path else Path(f"sglang-{port}.log")
        with log.open("wb") as sink:
            proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT)
        engine = cls(f"http://{host}:{port}", tp_size=tp_size, process=proc)
        try:
            engine.wait_healthy(startup_timeout_s, log)
        except BaseException:
            engine.close()
            raise
        return engine

    def wait_healthy(self, timeout_s: float = 60.0, log: Path | None = None) -> None:
        """Block until every server answers ``GET /health`` with 200."""
        deadline = time.monotonic() + timeout_s
        for url in self.server_urls:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    raise SGLangError(f"sglang server exited with {self.process.returncode}"
                                      + _tail(log))
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                        if resp.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise SGLangError(f"{url}/health not ready after {timeout_s}s" + _tail(log))
                time.sleep(1.0)

    # ------------------------------------------------------------------ Engine protocol
    async def generate(self, prompt_ids: list[int], sampling: SamplingParams) -> Completion:
        """POST ``/generate`` (see the module docstring) and parse the completion."""
        if self._closed:
            raise EngineClosedError("SGLangEngine.generate called after close()")
        if len(prompt_ids) == 0:
            raise RequestError("prompt_ids is empty; a completion needs at least one token")
        payload = {
            "input_ids": list(prompt_ids),
            "sampling_params": sampling_payload(sampling),
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
        }
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(
            self._pool, self._post, next(self._next_url), "/generate", payload
        )
        return parse_generate_response(body)

    def update_weights(self, weights: WeightsSource, *, weight_version: str | None = None) -> None:
        """Reload weights from a HF directory, or broadcast ``(name, tensor)`` pairs over NCCL.

        Raises:
            SGLangError: a server refused; or tensors were given before
                ``init_weight_update_group``.
        """
        if isinstance(weights, str | PathLike):
            payload: dict[str, Any] = {"model_path": str(weights), "flush_cache": True}
            if weight_version is not None:
                payload["weight_version"] = weight_version
            self._post_all("/update_weights_from_disk", payload)
        else:
            self._update_from_distributed(weights)

    def release_memory(self, tags: Sequence[str] | None = None) -> None:
        """Free the servers' GPU memory (weights, KV cache, CUDA graphs) before training."""
        self._post_all("/release_memory_occupation", {"tags": list(tags)} if tags else {})

    def resume_memory(self, tags: Sequence[str] | None = None) -> None:
        """Take the GPU memory back after training."""
        self._post_all("/resume_memory_occupation", {"tags": list(tags)} if tags else {})

    def flush_cache(self) -> None:
        """Drop the servers' prefix caches (e.g. after a weight update)."""
        self._post_all("/flush_cache", {})

    def close(self) -> None:
        """Stop the HTTP pool and the launched server, if any. Idempotent."""
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    # ------------------------------------------------------------------ NCCL weight path
    def init_weight_update_group(
        self,
        master_address: str,
        master_port: int,
        *,
        backend: str = "nccl",
        group_name: str = "weight_update_group",
        group_factory: GroupFactory | None = None,
    ) -> None:
        """Join this process (rank 0) and every server's TP ranks in one process group.

        Server ``i`` gets ``rank_offset = 1 + i * tp_size``; ``world_size = 1 + n * tp_size``.
        The servers block in the request until the group is formed, so the POSTs run in
        threads while this process joins.
        """
        world = 1 + len(self.server_urls) * self.tp_size
        posts = [
            self._pool.submit(self._post, url, "/init_weights_update_group", {
                "master_address": master_address,
                "master_port": master_port,
                "rank_offset": 1 + i * self.tp_size,
                "world_size": world,
                "group_name": group_name,
                "backend": backend,
            })
            for i, url in enumerate(self.server_urls)
        ]
        factory = group_factory or sglang_group_factory
        self._group = factory(
            backend=backend,
            init_method=f"tcp://{master_address}:{master_port}",
            world_size=world,
            rank=0,
            group_name=group_name,
        )
        self._group_name = group_name
        for post in posts:
            _check_success("/init_weights_update_group", post.result())

    def _update_from_distributed(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        if self._group is None:
            raise SGLangError(
                "update_weights with tensors needs init_weight_update_group(...) first; or pass "
                "a HF checkpoint directory"
            )
        items = list(weights)
        payload = {
            "names": [n for n, _ in items],
            "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in items],
            "shapes": [list(t.shape) for _, t in items],
            "group_name": self._group_name,
            "flush_cache": True,
        }
        posts = [self._pool.submit(self._post, u, "/update_weights_from_distributed", payload)
                 for u in self.server_urls]
        for _, tensor in items:
            self._group.broadcast(tensor.detach().contiguous())
        for post in posts:
            _check_success("/update_weights_from_distributed", post.result())

    # ------------------------------------------------------------------ HTTP
    def _post(self, url: str, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        data = json.dumps(payload).encode()
        req = urllib.request.Request(
            url + path, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout_s) as resp:
                raw = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:500]
            raise SGLangError(f"POST {url}{path} -> HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise SGLangError(f"POST {url}{path} failed: {exc}") from None
        try:
            body = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {"success": True, "message": raw}
        return body if isinstance(body, dict) else {"success": True, "message": body}

    def _post_all(self, path: str, payload: dict[str, Any]) -> None:
        threads = [self._pool.submit(self._post, u, path, payload) for u in self.server_urls]
        for fut in threads:
            _check_success(path, fut.result())


def _check_success(path: str, body: dict[str, Any]) -> None:
    if body.get("success") is False:
        raise SGLangError(f"{path} failed: {body.get('message', body)}")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _tail(log: Path | None, n: int = 2000) -> str:
    if log is None or not log.exists():
        return ""
    return "\n--- server log tail ---\n" + log.read_text(errors="replace")[-n:]


__all__ = ["SGLangEngine", "parse_generate_response", "sampling_payload", "sglang_group_factory"]
