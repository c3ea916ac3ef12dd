"""A loopback server that behaves like sglang 0.5.23's native HTTP API on the points rlvr relies on.

Used only for what CPU sglang cannot do or cannot show (tests/agents/test_sglang_real.py runs the
real server): NCCL-sized memory limits, the memory saver, deterministic seeds, old versions,
dp > 1, an ``SGLANG_RETURN_ORIGINAL_LOGPROB`` server, API keys. Each behaviour below is the
released server's (``docs/engines.md``, "The SGLang HTTP API rlvr relies on"; the 0.5.23
wheel's ``http_server.py``, ``tokenizer_manager.py`` and weight updater):

* unknown keys inside ``sampling_params`` and in admin bodies: HTTP 400;
* ``sampling_seed`` is ignored unless ``deterministic`` (``--enable-deterministic-inference``);
* versions <= 0.5.4 prepend up to five prompt tokens to ``output_ids``; ``/server_info`` exists
  from 0.5.10 (``/get_server_info`` before);
* ``original_logprob`` (``SGLANG_RETURN_ORIGINAL_LOGPROB=1``) reports un-tempered logprobs;
* prompt >= context or prompt + ``max_new_tokens`` > context: HTTP 400;
* an abort carrying a status code (``abort_next``) is an HTTP error with ``{"detail": ...}``;
* ``/update_weights_from_distributed`` allocates every announced tensor before loading: over
  ``memory_limit_bytes`` per request it fails with an out-of-memory message;
* from 0.5.23 ``/update_weights_from_distributed`` is refused (HTTP 400, before any broadcast)
  outside a ``/begin_weight_update`` .. ``/end_weight_update`` session;
* the weight-update group is made like sglang's ``init_custom_process_group`` (store prefixed
  with ``group_name``, then torch's helper prefixes ``group_name + "/"``);
* release asserts an idle scheduler and resuming a tag never released raises: either kills the
  scheduler (``dead``: every later request fails); weights do not survive a release without
  ``weights_cpu_backup`` (they come back as zeros); without ``memory_saver`` release/resume
  answer 200 and do nothing;
* ``/flush_cache`` answers 400 while requests run; with ``api_key`` every route but ``/health``
  needs ``Authorization: Bearer <key>``;
* LoRA (``lora=True``: ``--enable-lora``; sglang 0.5.23's ``tokenizer_control_mixin``):
  ``/load_lora_adapter`` ``{lora_name, lora_path, pinned}`` reads a peft directory (here with
  ``peft``, merged into a copy of the served model) and refuses a name already loaded, a rank
  over ``max_lora_rank`` or a server without LoRA (HTTP 400, ``success: false``);
  ``/unload_lora_adapter`` ``{lora_name}`` refuses an unknown name; a ``/generate`` with
  ``lora_path`` runs that adapter (an unknown one: HTTP 400); ``/v1/models`` lists adapters.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import torch
from torch.distributed import distributed_c10d as c10d

from rlvr.agents.engine import SamplingParams
from rlvr.agents.hf.engine import TransformersEngine

GENERATE_KEYS = {"input_ids", "text", "sampling_params", "return_logprob", "logprob_start_len",
                 "top_logprobs_num", "stream", "rid", "lora_path"}
SAMPLING_KEYS = {"max_new_tokens", "temperature", "top_p", "top_k", "min_p", "stop",
                 "stop_token_ids", "ignore_eos", "skip_special_tokens", "no_stop_trim", "n",
                 "sampling_seed"}
ADMIN_KEYS = {
    "/update_weights_from_disk": {"model_path", "load_format", "flush_cache", "weight_version"},
    "/init_weights_update_group": {"master_address", "master_port", "rank_offset", "world_size",
                                   "group_name", "backend"},
    "/update_weights_from_distributed": {"names", "dtypes", "shapes", "group_name",
                                         "flush_cache", "weight_version", "load_format"},
    "/release_memory_occupation": {"tags"},
    "/resume_memory_occupation": {"tags"},
    "/pause_generation": {"mode"},
    "/continue_generation": set(),
    "/destroy_weights_update_group": {"group_name"},
    "/begin_weight_update": {"selector"},
    "/end_weight_update": set(),
    "/flush_cache": set(),
    "/load_lora_adapter": {"lora_name", "lora_path", "pinned", "lora_id"},
    "/unload_lora_adapter": {"lora_name", "lora_id"},
}


# The stand-in's end of the group lives in the trainer's own process, where torch refuses a
# second group of the same name (a real server makes its group in its own process). Its name is
# therefore a string equal to no other and it is not put in torch's C++ registry; the store
# layout, which is what the test is about, comes from torch's helper unchanged.
_standin_thread = threading.local()
_register = c10d._register_process_group


class _StandinName(str):
    def __eq__(self, other):
        return other is self

    def __ne__(self, other):
        return other is not self

    __hash__ = str.__hash__


def _register_unless_standin(name, pg):
    if not getattr(_standin_thread, "active", False):
        _register(name, pg)


c10d._register_process_group = _register_unless_standin


def sglang_custom_group(*, backend, init_method, world_size, rank, group_name, timeout):
    """sglang 0.5.23's ``init_custom_process_group`` (sglang/srt/utils), step for step."""
    store, rank, world_size = next(c10d.rendezvous(init_method, rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = c10d.PrefixStore(group_name, store)
    _standin_thread.active = True
    try:
        pg, _ = c10d._new_process_group_helper(world_size, rank, [], backend, store,
                                               group_name=_StandinName(group_name),
                                               timeout=timeout)
    finally:
        _standin_thread.active = False
    c10d._world.pg_group_ranks[pg] = {i: i for i in range(world_size)}
    return pg


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5: a rollout opens one connection per episode at
    # once, and on a loaded machine the accept loop falls behind and the kernel resets the rest
    # (seen as "connection reset" in the sync-guard tests). sglang's uvicorn listens with 2048.
    request_queue_size = 2048
    daemon_threads = True


class _ServerV6(_Server):
    address_family = socket.AF_INET6


class FakeSGLang:
    def __init__(self, model_path, *, version="0.5.23", tp_size=1, dp_size=1, pp_size=1,
                 context_length=4096, deterministic=True, memory_saver=True,
                 weights_cpu_backup=False, original_logprob=False, api_key=None,
                 memory_limit_bytes=None, dtype="float32", host="127.0.0.1", device="cuda",
                 keep_old_weights=False, group_timeout_s=60, base_gpu_id=0, lora=False,
                 max_lora_rank=None, lora_target_modules=("all",)):
        self.engine = TransformersEngine(model_path)
        self.version = version
        self.args = {"tp_size": tp_size, "dp_size": dp_size, "pp_size": pp_size,
                     "dtype": dtype, "context_length": None, "device": device,
                     "enable_deterministic_inference": deterministic,
                     "enable_memory_saver": memory_saver,
                     "enable_weights_cpu_backup": weights_cpu_backup,
                     "model_path": str(model_path), "base_gpu_id": base_gpu_id,
                     "gpu_id_step": 1, "enable_lora": lora,
                     "max_lora_rank": max_lora_rank,
                     "lora_target_modules": list(lora_target_modules) if lora else None}
        self.adapters: dict[str, TransformersEngine] = {}
        self.context_length = context_length
        self.original_logprob = original_logprob
        self.api_key = api_key
        self.memory_limit_bytes = memory_limit_bytes
        self.keep_old_weights = keep_old_weights
        self.group_timeout_s = group_timeout_s
        self.has_sessions = tuple(int(x) for x in version.split(".")[:3]) >= (0, 5, 23)
        self.session = False
        self.calls: list[tuple[str, dict]] = []
        self.dist_requests: list[dict] = []
        self.group = None
        self.dead = False
        self.paused = False
        self.released: set[str] = set()
        self.active = 0
        self.abort_next: tuple[int, str] | None = None
        self.hold: threading.Event | None = None  # set: running requests wait on it
        self.gate = threading.Event()
        self.gate.set()
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake.calls.append((self.path, {}))
                if not self._authorized():
                    return
                status, answer = fake.get(self.path)
                self._reply(status, answer)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                fake.calls.append((self.path, body))
                if not self._authorized():
                    return
                try:
                    status, answer = fake.handle(self.path, body)
                except ValueError as exc:
                    status, answer = 400, {"error": {"message": str(exc)}}
                self._reply(status, answer)

            def _authorized(self):
                if fake.dead:
                    self._reply(500, {"error": {"message": "scheduler died"}})
                    return False
                if fake.api_key and self.path != "/health" and \
                        self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self._reply(401, {"error": "Unauthorized"})
                    return False
                return True

            def _reply(self, status, answer):
                data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        bare = host.strip("[]")
        server_class = _ServerV6 if ":" in bare else _Server
        self.server = server_class((bare, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # ------------------------------------------------------------------ routes
    def get(self, path):
        if path == "/health":
            return 200, {}
        parsed = tuple(int(x) for x in self.version.split(".")[:3])
        if path == "/server_info" and parsed >= (0, 5, 10) or path == "/get_server_info":
            return 200, {**self.args, "version": self.version, "internal_states": [],
                         "max_req_input_len": self.context_length - 6}
        if path == "/v1/models":
            loras = [{"id": name, "object": "model", "parent": "m"} for name in self.adapters]
            return 200, {"object": "list", "data": [{"id": "m", "object": "model",
                                                     "max_model_len": self.context_length},
                                                    *loras]}
        return 404, {"detail": "Not Found"}

    def handle(self, path, body):
        if path == "/generate":
            return self.generate(body)
        if path not in ADMIN_KEYS:
            return 404, {"detail": "Not Found"}
        unknown = set(body) - ADMIN_KEYS[path]
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        if path == "/flush_cache":
            if self.active:
                return 400, "Flush cache failed: requests are running."
            return 200, "Cache flushed."
        if path == "/pause_generation":
            self.paused = True
            self.gate.clear()
            while self.active:  # abort mode: running requests end before it answers
                time.sleep(0.01)
            return 200, {"message": "Generation paused successfully.", "status": "ok"}
        if path == "/continue_generation":
            self.paused = False
            self.gate.set()
            return 200, {"message": "Generation continued successfully.", "status": "ok"}
        if path in ("/begin_weight_update", "/end_weight_update"):
            if not self.has_sessions:
                return 404, {"detail": "Not Found"}
            opening = path == "/begin_weight_update"
            if self.session == opening:
                return 400, {"success": False, "message": "session already open" if opening
                             else "no weight-update session is open"}
            self.session = opening
            return 200, {"success": True, "message": "Success"}
        if path == "/destroy_weights_update_group":
            self._forget_group()
            return 200, {"success": True, "message": "ok"}
        if path == "/release_memory_occupation":
            return self.release(body)
        if path == "/resume_memory_occupation":
            return self.resume(body)
        if path in ("/load_lora_adapter", "/unload_lora_adapter"):
            return self.lora_update(path, body)
        if path == "/update_weights_from_disk":
            if not self.keep_old_weights:
                self.engine.update_weights(body["model_path"])
        elif path == "/init_weights_update_group":
            self.group = sglang_custom_group(
                backend=body["backend"],
                init_method=f"tcp://{body['master_address']}:{body['master_port']}",
                world_size=body["world_size"], rank=body["rank_offset"],
                group_name=body["group_name"], timeout=timedelta(seconds=self.group_timeout_s))
        elif path == "/update_weights_from_distributed":
            return self.update_distributed(body)
        return 200, {"success": True, "message": "ok"}

    def lora_update(self, path, body):
        def refused(message):
            return 400, {"success": False, "error_message": message, "loaded_adapters": None}

        if not self.args["enable_lora"]:
            return refused("LoRA is not enabled. Please set `--enable-lora` to enable LoRA.")
        name = body["lora_name"]
        if path == "/unload_lora_adapter":
            if self.adapters.pop(name, None) is None:
                return refused(f"LoRA adapter {name} is not loaded")
        else:
            if name in self.adapters:
                return refused(f"LoRA adapter {name} is already loaded")
            import peft

            rank = json.loads((Path(body["lora_path"]) / "adapter_config.json").read_text())["r"]
            if rank > (self.args["max_lora_rank"] or 0):
                return refused(f"LoRA adapter rank {rank} exceeds --max-lora-rank "
                               f"{self.args['max_lora_rank']}")
            base = copy.deepcopy(self.engine.model)
            merged = peft.PeftModel.from_pretrained(base, body["lora_path"]).merge_and_unload()
            self.adapters[name] = TransformersEngine(merged.eval(), self.engine.tokenizer)
        return 200, {"success": True, "error_message": None,
                     "loaded_adapters": {n: n for n in self.adapters}}

    def update_distributed(self, body):
        if self.has_sessions and not self.session:  # 0.5.23: refused before any broadcast
            return 400, {"success": False, "message": "update_weights_from_distributed must run "
                         "between begin_weight_update() and end_weight_update()"}
        self.dist_requests.append(body)
        tensors, total = [], 0
        for dtype, shape in zip(body["dtypes"], body["shapes"]):
            t = torch.empty(shape, dtype=getattr(torch, dtype))
            total += t.numel() * t.element_size()
            torch.distributed.broadcast(t, src=0, group=self.group)
            tensors.append(t)
        if self.memory_limit_bytes is not None and total > self.memory_limit_bytes:
            return 400, {"success": False, "message": f"CUDA out of memory: tried to allocate "
                                                      f"{total} bytes for one update"}
        if not self.keep_old_weights:
            self.engine.update_weights(list(zip(body["names"], tensors)))
        return 200, {"success": True, "message": "ok"}

    def release(self, body):
        if not self.args["enable_memory_saver"]:
            return 200, None
        if self.active and not self.paused:
            self.dead = True  # the scheduler's assertion failed: it is gone
            return 500, {"error": {"message": "AssertionError: release needs an idle scheduler"}}
        tags = set(body.get("tags") or ("kv_cache", "weights", "cuda_graph"))
        self.released |= tags
        if "weights" in tags and not self.args["enable_weights_cpu_backup"]:
            with torch.no_grad():
                for p in self.engine.model.parameters():
                    p.zero_()
        return 200, None

    def resume(self, body):
        if not self.args["enable_memory_saver"]:
            return 200, None
        tags = set(body.get("tags") or ("kv_cache", "weights", "cuda_graph"))
        if not tags <= self.released:
            self.dead = True  # resuming a tag never released raises in the scheduler
            never = sorted(tags - self.released)
            return 500, {"error": {"message": f"resume of unreleased {never}"}}
        self.released -= tags
        return 200, None

    def generate(self, body):
        unknown = set(body) - GENERATE_KEYS
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        sp = body.get("sampling_params", {})
        bad = set(sp) - SAMPLING_KEYS
        if bad:
            raise ValueError(f"unknown sampling_params {sorted(bad)}")
        ids = body["input_ids"]
        if not (isinstance(ids, list) and all(isinstance(t, int) for t in ids)):
            raise ValueError("input_ids must be a list of ints")
        max_new = sp.get("max_new_tokens", 128)
        if len(ids) >= self.context_length - 6:  # the scheduler's max_req_input_len
            return 400, {"error": {"message": f"Input length ({len(ids)} tokens) exceeds the "
                         f"maximum allowed length ({self.context_length - 6} tokens)."}}
        if len(ids) >= self.context_length:
            raise ValueError(f"The input ({len(ids)} tokens) is longer than the model's context "
                             f"length ({self.context_length} tokens).")
        if len(ids) + max_new > self.context_length:
            raise ValueError("Requested token count exceeds the model's maximum context length "
                             f"of {self.context_length} tokens.")
        lora = body.get("lora_path")
        if lora is not None and lora not in self.adapters:
            raise ValueError(f"The following requested LoRA adapters are not loaded: {lora}")
        if self.abort_next is not None:
            status, message = self.abort_next
            self.abort_next = None
            return status, {"detail": message}
        self.gate.wait(timeout=60)
        with self.lock:
            self.active += 1
        try:
            if self.hold is not None:
                self.hold.wait(30)
            return 200, self._generate(ids, sp, body)
        finally:
            with self.lock:
                self.active -= 1

    def _generate(self, ids, sp, body):
        seed = sp.get("sampling_seed") if self.args["enable_deterministic_inference"] else None
        temperature = sp.get("temperature", 1.0)
        sampling = SamplingParams(
            temperature=temperature, top_p=sp.get("top_p", 1.0),
            top_k=sp.get("top_k", -1), max_new_tokens=sp.get("max_new_tokens", 128),
            stop_token_ids=tuple(sp.get("stop_token_ids", ())), stop=tuple(sp.get("stop", ())),
            seed=seed,
        )
        engine = self.adapters[body["lora_path"]] if body.get("lora_path") else self.engine
        out = asyncio.run(engine.generate(ids, sampling))
        logprobs = out.logprobs
        t = temperature if temperature > 0 else 1.0
        if self.original_logprob or body.get("top_logprobs_num"):
            full = self._logprobs(ids, out.token_ids, t, engine)
            untempered = self._logprobs(ids, out.token_ids, 1.0, engine)
            if self.original_logprob:
                logprobs = [float(full_row[tok]) for full_row, tok in zip(untempered,
                                                                          out.token_ids)]
        finish = ({"type": "stop", "matched": out.token_ids[-1]} if out.finish_reason == "stop"
                  else {"type": "length", "length": len(out.token_ids)})
        out_ids = list(out.token_ids)
        parsed = tuple(int(x) for x in self.version.split(".")[:3])
        if parsed <= (0, 5, 4):
            out_ids = ids[-5:] + out_ids  # upstream issue #17240
        meta = {
            "id": "r", "finish_reason": finish, "prompt_tokens": len(ids),
            "completion_tokens": len(out.token_ids), "cached_tokens": 0,
            "output_token_logprobs": [[lp, tok, None] for lp, tok in zip(logprobs,
                                                                         out.token_ids)],
        }
        if body.get("top_logprobs_num"):
            k = body["top_logprobs_num"]
            rows = untempered if self.original_logprob else full
            meta["output_top_logprobs"] = [
                [[float(v), int(i), None] for v, i in zip(*row.topk(k))] for row in rows]
        return {"output_ids": out_ids, "meta_info": meta}

    def _logprobs(self, ids, out_ids, temperature, engine):
        seq = torch.tensor([ids + out_ids])
        with torch.no_grad():
            logits = engine.model(seq).logits[0, len(ids) - 1: -1].float()
        return torch.log_softmax(logits / temperature, -1)

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.engine.close()
        self._forget_group()

    def _forget_group(self):
        if self.group is not None:  # forget it without unregistering the trainer's name
            for table in (c10d._world.pg_map, c10d._world.pg_names, c10d._world.pg_group_ranks,
                          c10d._world.pg_backend_config, c10d._world.pg_to_tag):
                table.pop(self.group, None)
            for pgs in c10d._world.tags_to_pg.values():
                if self.group in pgs:
                    pgs.remove(self.group)
            self.group = None


def json_body(fake: FakeSGLang, path: str) -> list[dict[str, Any]]:
    """Bodies of every call ``fake`` received on ``path``."""
    return [b for p, b in fake.calls if p == path]
