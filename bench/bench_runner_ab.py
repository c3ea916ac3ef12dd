"""The episode runner's own cost: this tree's runner vs one from a git revision, side by side.

Plays the quickstart's 16 tasks x 8 samples (rlvr/Math-v0, reused envs) with an engine that
answers at once ("19" then end of turn), alternating the two runners step by step, and reports
the median wall time and process CPU time per 128 episodes of each (CPU time is the steadier of
the two on a shared machine). Both runners must give the same trajectories.

    .venv/bin/python bench/bench_runner_ab.py --base 1ef967c [--steps 30]

The base runner is read from ``git show BASE:agents/runner.py``; it shares the rest of
``agents`` with this tree.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transformers import AutoTokenizer

import rlvr.agents.runner as current
from rlvr.agents.engine import Completion
from rlvr.config import load_config
from rlvr.tiny import tiny_model_dir

REPO = Path(__file__).resolve().parents[1]


def base_runner(rev: str):
    source = subprocess.run(["git", "show", f"{rev}:agents/runner.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "runner_base.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("runner_base", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["runner_base"] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="1ef967c")
    parser.add_argument("--steps", type=int, default=30)
    ns = parser.parse_args()
    cfg = load_config(REPO / "configs" / "quickstart.yaml", [])
    tok = AutoTokenizer.from_pretrained(tiny_model_dir(cfg.model.tiny))
    answer = tok.encode("19", add_special_tokens=False) + [tok.convert_tokens_to_ids("<|im_end|>")]

    class Instant:
        async def generate(self, prompt_ids, sampling):
            await asyncio.sleep(0)
            return Completion(list(answer), [-0.1] * len(answer), "stop")

    modules = {"base": base_runner(ns.base), "current": current}
    runners = {k: m.EpisodeRunner(Instant(), tok, cfg.runner_config()) for k, m in modules.items()}

    def play(name: str, step: int):
        mod, runner = modules[name], runners[name]
        specs = [mod.EpisodeSpec(env_id=cfg.env.id, env_kwargs=dict(cfg.env.kwargs),
                                 seed=1000 * step + j, group_id=str(j)) for j in range(16)]

        async def go():
            return await asyncio.gather(*(runner.arun([s], group_size=8, seed=j)
                                          for j, s in enumerate(specs)))

        return [t for g in asyncio.run(go()) for t in g]

    times: dict[str, list[tuple[float, float]]] = {k: [] for k in modules}
    for step in range(ns.steps):
        outs = {}
        for name in (["base", "current"] if step % 2 else ["current", "base"]):
            wall, cpu = time.perf_counter(), time.process_time()
            outs[name] = play(name, step)
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
        a, b = outs["base"], outs["current"]
        assert [(t.response_ids, t.token_level_scores, t.metadata) for t in a] == \
            [(t.response_ids, t.token_level_scores, t.metadata) for t in b]
    print(f"128 quickstart episodes, instant engine, {ns.steps} alternating steps, load "
          f"{os.getloadavg()[0]:.1f}")
    med = {}
    for name, rows in times.items():
        rows = rows[4:]
        med[name] = (statistics.median(w for w, _ in rows), statistics.median(c for _, c in rows))
        print(f"  {name:8s} wall {1e3 * med[name][0]:6.1f} ms   cpu {1e3 * med[name][1]:6.1f} ms")
    print(f"  base/current: wall {med['base'][0] / med['current'][0]:.2f}x, "
          f"cpu {med['base'][1] / med['current'][1]:.2f}x")
    for runner in runners.values():
        runner.close()


if __name__ == "__main__":
    main()
