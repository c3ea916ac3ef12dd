"""Several real sglang CPU servers behind the real sglang-router: what they cost and deliver.

On the tiny model (``rlvr.tiny``), with the servers' venv (``$RLVR_SGLANG_PYTHON``, built by
``bash dev.sh setup-sglang``, which installs ``sglang-router``):

* start: one server alone, then ``SGLangEngine.launch(servers=N)`` (N servers started at once,
  then the router once they are healthy): wall seconds each;
* memory: each server's process tree (launcher, scheduler, detokenizer) as PSS, which counts
  shared pages once, and RSS;
* generation: ``--requests`` concurrent requests of ``--new-tokens`` tokens through the router
  and straight to one server: new tokens/s, and how the router split the requests;
* weight sync of the tiny model's tensors (disk and gloo broadcast) to all N servers and to one;
* in-flight updates (pause, update, continue / abort) across all N servers;
* training through the router: 3 async steps (``max_staleness=1``, one rank) and 2 synchronous
  steps on two torchrun ranks: wall seconds, sync-guard gap, episodes accounted.

Prints one table and writes JSON (``--out``).

    RLVR_SGLANG_PYTHON=~/.cache/rlvr/sglang-0.5.23-<hash>/bin/python \\
        nice -n 5 python bench/bench_router.py                # ~6 min on 2 CPU cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout, not an install

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [[5 + i, 17, 40 + 2 * i, 9, 100 + i] for i in range(8)]


def tree_memory_mb(pid: int) -> tuple[float, float]:
    """(PSS, RSS) in MB of every process in ``pid``'s process group."""
    import psutil

    pgid = os.getpgid(pid)
    pss = rss = 0.0
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) != pgid:
                continue
            info = proc.memory_full_info()
        except (psutil.Error, ProcessLookupError):
            continue
        pss += getattr(info, "pss", info.rss)
        rss += info.rss
    return pss / 2**20, rss / 2**20


def generate_rate(engine: Any, requests: int, new_tokens: int) -> tuple[float, int]:
    """New tokens/s of ``requests`` concurrent requests (the random model rarely samples eos)."""
    from rlvr.agents.engine import SamplingParams

    sp = SamplingParams(temperature=1.0, max_new_tokens=new_tokens)
    prompts = [PROMPTS[i % len(PROMPTS)][:4] + [200 + i] for i in range(requests)]

    async def run() -> list[Any]:
        return await asyncio.gather(*(engine.generate(p, sp) for p in prompts))

    t0 = time.perf_counter()
    outs = asyncio.run(run())
    seconds = time.perf_counter() - t0
    tokens = sum(len(o.token_ids) for o in outs)
    return tokens / seconds, tokens


def generates(procs: list[Any]) -> list[int]:
    return [p.log.read_text(errors="replace").count('"POST /generate HTTP') for p in procs]


def trained_copy(model_path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor(PROMPTS)
    model(ids, labels=ids).loss.backward()
    opt.step()
    return model.eval()


def sync_seconds(urls: str, server_urls: list[str], weights: dict[str, torch.Tensor], mode: str,
                 model_path: Path, work: Path, repeats: int) -> float:
    """Median seconds of ``update_weights`` with ``weights`` to ``server_urls`` (then restored)."""
    from rlvr.agents.sglang import SGLangEngine

    engine = SGLangEngine(urls, server_urls=server_urls, allow_unseeded=True, weight_sync=mode,
                          sync_dir=work / f"sync-{mode}-{len(server_urls)}")
    try:
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            engine.update_weights(weights.items())
            times.append(time.perf_counter() - t0)
        engine.update_weights(str(model_path))
        return statistics.median(times)
    finally:
        engine.close()


def inflight_seconds(router: Any, weights: dict[str, torch.Tensor], mode: str,
                     model_path: Path, work: Path) -> tuple[float, int]:
    """Seconds of one in-flight update while 8 requests run; requests regenerated."""
    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.sglang import SGLangEngine

    engine = SGLangEngine(router.urls[0], server_urls=router.server_urls, allow_unseeded=True,
                          weight_sync="disk", sync_dir=work / f"inflight-{mode}",
                          max_concurrency=len(PROMPTS))
    try:
        engine.set_weight_version(0)
        sp = SamplingParams(temperature=1.0, max_new_tokens=300)

        async def run() -> list[Any]:
            return await asyncio.gather(*(engine.generate(p, sp) for p in PROMPTS))

        thread = threading.Thread(target=lambda: asyncio.run(run()))
        thread.start()
        time.sleep(1.0)
        t0 = time.perf_counter()
        engine.update_weights_in_flight(weights.items(), 1, mode)  # type: ignore[arg-type]
        seconds = time.perf_counter() - t0
        thread.join(300)
        return seconds, engine.regenerated
    finally:
        engine.update_weights(str(model_path), weight_version="default")
        engine.close()


def train_overrides(model_path: Path, out: Path, router_url: str, steps: int) -> list[str]:
    return [f"model.path={model_path}", "sft.enabled=false", f"trainer.output_dir={out}",
            f"trainer.steps={steps}", "trainer.progress=false", "trainer.tensorboard=false",
            "trainer.plot=false", "trainer.export_at_end=false", "trainer.checkpoint_every=0",
            "rollout.prompts_per_step=4", "rollout.group_size=4", "eval.tasks=8",
            "eval.every=0", "actor.optim.lr=3e-3", "actor.optim.schedule=constant",
            "rollout.engine=sglang", f"rollout.sglang.url={router_url}",
            "rollout.sglang.allow_unseeded=true", "rollout.max_logprob_diff=1e-4"]


def async_training(model_path: Path, router_url: str, work: Path) -> dict[str, Any]:
    from rlvr.config import load_config
    from rlvr.trainer import Trainer

    config = load_config(REPO / "configs" / "quickstart.yaml", [
        *train_overrides(model_path, work / "async", router_url, 3),
        "rollout.max_staleness=1", "actor.tis_cap=2.0", "rollout.inflight_update=continue"])
    t0 = time.perf_counter()
    trainer = Trainer(config, log=lambda *_: None)
    history = trainer.train().history
    producer = trainer.rollout.producer
    assert producer is not None
    return {"seconds": time.perf_counter() - t0, "trained": producer.trained,
            "dropped": dict(producer.dropped), "accounted": producer.accounted,
            "logprob_diff_step1": history[0]["rollout/logprob_diff"],
            "inflight_updates": history[-1]["async/inflight_updates"]}


def torchrun_training(model_path: Path, router_url: str, work: Path) -> dict[str, Any]:
    from rlvr.config import load_config
    from rlvr.config.loader import dump_config
    from rlvr.metrics import read_jsonl

    out = work / "ddp"
    config = load_config(REPO / "configs" / "quickstart.yaml",
                         train_overrides(model_path, out, router_url, 2))
    cfg = work / "ddp.yaml"
    dump_config(config, cfg)
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", "-m", "rlvr.cli", "train", str(cfg)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
                          start_new_session=True, check=False)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"torchrun failed:\n{proc.stderr[-3000:]}")
    rows = [r for r in read_jsonl(out / "metrics.jsonl") if "rollout/logprob_diff" in r]
    return {"seconds": seconds, "steps": len(rows),
            "logprob_diff_max": max(r["rollout/logprob_diff"] for r in rows)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3, help="weight syncs timed per mode")
    ap.add_argument("--gen-repeats", type=int, default=3, help="generation runs per target")
    ap.add_argument("--skip-training", action="store_true")
    ap.add_argument("--out", default="bench/results/router.json")
    args = ap.parse_args(argv)

    from rlvr.agents.sglang import SGLangEngine
    from rlvr.tiny import tiny_model_dir

    python = os.environ.get("RLVR_SGLANG_PYTHON")
    if not python or not Path(python).exists():
        raise SystemExit("set RLVR_SGLANG_PYTHON to the sglang venv's python "
                         "(bash dev.sh setup-sglang prints where it is)")
    model = tiny_model_dir()
    work = Path(tempfile.mkdtemp(prefix="bench-router-"))
    result: dict[str, Any] = {"machine": f"{platform.node()} {os.cpu_count()} CPUs",
                              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                              "command": " ".join(["python", "bench/bench_router.py",
                                                   *(argv or sys.argv[1:])]),
                              "servers": args.servers}
    rows: list[tuple[str, str]] = []

    t0 = time.perf_counter()
    one = SGLangEngine.launch(model, python=python, device="cpu", allow_unseeded=True,
                              startup_timeout_s=600, log_path=work / "one" / "server.log")
    result["start_one_server_s"] = time.perf_counter() - t0
    try:
        _ = one.infos
        result["one_server_memory_mb"] = dict(zip(("pss", "rss"),
                                                  tree_memory_mb(one.processes[0].popen.pid)))
    finally:
        one.close()
    rows.append(("start: 1 server (s)", f"{result['start_one_server_s']:.0f}"))

    t0 = time.perf_counter()
    router = SGLangEngine.launch(model, python=python, device="cpu", allow_unseeded=True,
                                 startup_timeout_s=600, servers=args.servers,
                                 log_path=work / "routed" / "server.log")
    result["start_routed_s"] = time.perf_counter() - t0
    rows.append((f"start: {args.servers} servers + router (s)", f"{result['start_routed_s']:.0f}"))
    try:
        servers = router.processes[: args.servers]
        mem = [tree_memory_mb(p.popen.pid) for p in servers]
        result["server_memory_mb"] = [{"pss": a, "rss": b} for a, b in mem]
        result["router_memory_mb"] = dict(zip(("pss", "rss"),
                                              tree_memory_mb(router.processes[-1].popen.pid)))
        rows.append(("memory per server, PSS / RSS (MB)",
                     " ; ".join(f"{a:.0f} / {b:.0f}" for a, b in mem)))
        rows.append(("memory of the router, PSS / RSS (MB)",
                     f"{result['router_memory_mb']['pss']:.0f} / "
                     f"{result['router_memory_mb']['rss']:.0f}"))

        # The same requests to server 0 alone, to both round-robin (no router) and through the
        # router; each engine warmed once, then the three alternated --gen-repeats times.
        engines = {"1 server": SGLangEngine(router.server_urls[0], allow_unseeded=True),
                   f"{args.servers} servers, round-robin": SGLangEngine(
                       router.server_urls, allow_unseeded=True),
                   f"{args.servers} servers via router": router}
        rates: dict[str, list[float]] = {name: [] for name in engines}
        for engine in engines.values():
            generate_rate(engine, args.requests, args.new_tokens)  # attach and warm up
        before = generates(servers)
        for _ in range(args.gen_repeats):
            for name, engine in engines.items():
                rates[name].append(generate_rate(engine, args.requests, args.new_tokens)[0])
        split = [b - a for a, b in zip(before, generates(servers))]
        for engine in engines.values():
            if engine is not router:
                engine.close()
        result["tokens_per_s"] = rates
        result["requests_per_server_all_runs"] = split
        for name, got in rates.items():
            rows.append((f"generate {args.requests}x{args.new_tokens}: {name} (tok/s)",
                         f"median {statistics.median(got):.0f} (runs "
                         f"{', '.join(f'{r:.0f}' for r in got)})"))
        rows.append(("requests per server over those runs", str(split)))

        weights = {k: v.detach().clone() for k, v in trained_copy(model).state_dict().items()}
        result["sync_s"] = {}
        for mode in ("disk", "distributed"):
            for targets in (router.server_urls[:1], router.server_urls):
                sec = sync_seconds(targets[0] if len(targets) == 1 else router.urls[0],
                                   list(targets), weights, mode, model, work, args.repeats)
                result["sync_s"][f"{mode}_{len(targets)}"] = sec
                rows.append((f"weight sync {mode} to {len(targets)} server(s) (s, median)",
                             f"{sec:.2f}"))
        result["inflight_s"] = {}
        for mode in ("continue", "abort"):
            sec, regen = inflight_seconds(router, weights, mode, model, work)
            result["inflight_s"][mode] = {"seconds": sec, "regenerated": regen}
            rows.append((f"in-flight update ({mode}) across {args.servers} servers (s)",
                         f"{sec:.2f}" + (f", {regen} regenerated" if mode == "abort" else "")))

        if not args.skip_training:
            run = async_training(model, router.urls[0], work)
            result["async_training"] = run
            rows.append(("async training, 3 steps, 1 rank (s)",
                         f"{run['seconds']:.1f}; {run['trained']} trained, dropped "
                         f"{run['dropped']}, step-1 gap {run['logprob_diff_step1']:.1e}"))
            ddp = torchrun_training(model, router.urls[0], work)
            result["torchrun_training"] = ddp
            rows.append(("sync training, 2 steps, 2 torchrun ranks (s)",
                         f"{ddp['seconds']:.1f}; max gap {ddp['logprob_diff_max']:.1e}"))
    finally:
        router.close()

    width = max(len(name) for name, _ in rows)
    print(f"\n{result['machine']}, {result['date']}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
