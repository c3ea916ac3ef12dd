"""rlvr's RL loop vs TRL's GRPOTrainer on the CPU quickstart, side by side, same start and recipe.

Both arms start from the same warm-started model (the quickstart's ``sft_model``), train on the
same task (``rlvr/Math-v0`` two-operand addition, the quickstart's training tasks) with the same
recipe: 16 prompts x 8 samples per step, at most 6 new tokens, Dr. GRPO (group-mean baseline, no
std scaling, loss divided by the constant batch x max-tokens), no KL, PPO clip 0.2, AdamW lr 3e-4
decaying linearly to 0 over the run, grad clip 1.0, temperature 1. Neither arm evaluates or
checkpoints during the run. Both final models (and the start) are then scored by ``rlvr eval`` on
the quickstart's 200 held-out tasks (greedy), so the gains compare on the same yardstick.

    .venv/bin/python bench/bench_vs_trl.py --sft runs/quickstart/sft_model --seeds 0 1 2

Held-out gains differ between runs by chance (each arm samples its own episodes; seeds and start
models move them by several points), so ``--sft`` takes several start models and the gains are
compared as means with their standard errors. ``bench/update_vs_trl.py`` checks that on the same
episodes both learners make the same update.

(install TRL with the ``bench`` extra: ``.venv/bin/pip install -e '.[bench]'``). rlvr is imported
before torch, as in ``rlvr train``, so both arms run with OpenMP's passive waiting
(``OMP_WAIT_POLICY=PASSIVE`` unless set; see ``rlvr/__init__.py``). Arms alternate
per seed (rlvr first on even seeds) so machine load hits both alike. Prints the table with the
ratios and writes ``bench/results/vs_trl.json``. CPU timings on a shared machine are noisy:
compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import rlvr  # noqa: F401  # before torch: the OpenMP wait policy of `rlvr train`

# isort: split
import torch

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "quickstart.yaml"


def quickstart(overrides: list[str], config: Path = CONFIG) -> Any:
    from rlvr.config import load_config

    return load_config(config, overrides)


# ---------------------------------------------------------------------------- rlvr arm
def run_rlvr(sft: Path, out: Path, seed: int, steps: int, extra: list[str],
             recipe: Path = CONFIG) -> dict[str, Any]:
    from rlvr.trainer import train

    config = quickstart([
        f"model.path={sft}", "sft.enabled=false", f"trainer.output_dir={out}",
        f"trainer.seed={seed}", f"trainer.steps={steps}", "eval.every=0",
        "trainer.checkpoint_every=0", "trainer.progress=false", "trainer.tensorboard=false",
        "trainer.plot=false", "trainer.export_at_end=true", *extra,
    ], recipe)
    result = train(config, log=lambda *_: None)
    hist = result.history

    def per_step(key: str) -> float:
        return sum(m.get(key, 0.0) for m in hist) / max(len(hist), 1)

    return {
        "rl_seconds": result.rl_seconds, "steps": len(hist),
        "rollout_s_per_step": per_step("time/rollout"),
        "update_s_per_step": per_step("time/prepare") + per_step("time/update"),
        "clipped_step_frac": sum(m.get("actor/grad_norm", 0.0) > config.actor.optim.grad_clip
                                 for m in hist) / max(len(hist), 1),
        "pg_clipfrac": per_step("actor/pg_clipfrac"),
        "completion_tokens_mean": per_step("response/length_mean"),
        **learning_curve([m.get("reward/mean", 0.0) for m in hist],
                         [m.get("response/clip_ratio", 0.0) for m in hist]),
        "model": str(result.export_dir),
    }


def learning_curve(rewards: list[float], cut: list[float], window: int = 15) -> dict[str, float]:
    """Training reward over the first and last ``window`` steps, and the share of cut completions.

    A completion is cut when it reached the token budget without ending its turn (rlvr: finish
    reason "length", scored 0 without asking the env; TRL: ``completions/clipped_ratio``, scored
    by the reward function like any other completion).
    """
    def avg(xs: list[float]) -> float:
        return sum(xs) / max(len(xs), 1)

    return {"reward_first": avg(rewards[:window]), "reward_last": avg(rewards[-window:]),
            "cut_first": avg(cut[:window]), "cut_mean": avg(cut)}


# ---------------------------------------------------------------------------- TRL arm
class TaskReward:
    """TRL reward function: the quickstart env's own verifier on each completion."""

    __name__ = "math_env_reward"

    def __init__(self, env_id: str, kwargs: dict[str, Any]) -> None:
        from rlvr import envs

        self.env = envs.make(env_id, **kwargs)

    def __call__(self, prompts: list[Any], completions: list[Any], task_index: list[int],
                 **_: Any) -> list[float]:
        rewards = []
        for completion, index in zip(completions, task_index):
            text = completion[-1]["content"] if isinstance(completion, list) else completion
            self.env.reset(options={"task_index": int(index)})
            rewards.append(float(self.env.step(text)[1]))
        return rewards


def train_dataset(env_id: str, kwargs: dict[str, Any], n: int) -> Any:
    """The env's training tasks as a TRL conversational prompt dataset (with task indices)."""
    from datasets import Dataset

    from rlvr import envs

    env = envs.make(env_id, **kwargs)
    rows = []
    for i in range(n):
        messages, _ = env.reset(options={"task_index": i})
        rows.append({"prompt": [dict(m) for m in messages], "task_index": i})
    return Dataset.from_list(rows)


def trl_recipe(cfg: Any, out: Path, seed: int, steps: int) -> Any:
    """The recipe (``cfg``) as TRL's ``GRPOConfig``: the TRL arm's settings."""
    from trl import GRPOConfig

    group = cfg.rollout.group_size
    schedule = {"linear": "linear", "constant": "constant"}[cfg.actor.optim.schedule]
    return GRPOConfig(
        output_dir=str(out), seed=seed, max_steps=steps, use_cpu=True, bf16=False,
        per_device_train_batch_size=cfg.rollout.prompts_per_step * group, num_generations=group,
        gradient_accumulation_steps=1, num_iterations=1,
        max_completion_length=cfg.rollout.runner.max_response_tokens,
        temperature=cfg.rollout.runner.sampling.temperature,
        top_p=1.0, top_k=0, learning_rate=cfg.actor.optim.lr, lr_scheduler_type=schedule,
        warmup_steps=0, weight_decay=0.0, adam_beta1=0.9, adam_beta2=0.999,
        adam_epsilon=1e-8, max_grad_norm=cfg.actor.optim.grad_clip, beta=0.0,
        epsilon=cfg.actor.clip_low, epsilon_high=cfg.actor.clip_high, loss_type="dr_grpo",
        scale_rewards="none", mask_truncated_completions=False, save_strategy="no",
        report_to="none", logging_steps=1, disable_tqdm=True, dataloader_num_workers=0,
    )


def run_trl(sft: Path, out: Path, seed: int, steps: int, threads: int,
            recipe: Path = CONFIG) -> dict[str, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback
    from trl import GRPOTrainer

    cfg = quickstart([], recipe)
    env_kwargs = dict(cfg.env.kwargs)
    n_tasks = int(env_kwargs["source_kwargs"]["n_tasks"])
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        model = AutoModelForCausalLM.from_pretrained(sft, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(sft)
        gen_seconds = [0.0]
        generate = model.generate

        def timed_generate(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return generate(*args, **kwargs)
            finally:
                gen_seconds[0] += time.perf_counter() - start

        model.generate = timed_generate  # type: ignore[method-assign]
        args = trl_recipe(cfg, out, seed, steps)
        trainer = GRPOTrainer(
            model=model, reward_funcs=[TaskReward(cfg.env.id, env_kwargs)], args=args,
            train_dataset=train_dataset(cfg.env.id, env_kwargs, n_tasks),
            processing_class=tokenizer,
        )
        trainer.remove_callback(PrinterCallback)  # its per-step dicts would flood the table
        start = time.perf_counter()
        trainer.train()
        seconds = time.perf_counter() - start
        export = out / "export"
        trainer.save_model(str(export))
        tokenizer.save_pretrained(export)
        logs = [r for r in trainer.state.log_history if "loss" in r]
        clipped = [r.get("grad_norm", 0.0) > args.max_grad_norm for r in logs]
        curve = learning_curve([r.get("reward", 0.0) for r in logs],
                               [r.get("completions/clipped_ratio", 0.0) for r in logs])
    finally:
        torch.set_num_threads(before)
    return {
        "rl_seconds": seconds, "steps": steps,
        "rollout_s_per_step": gen_seconds[0] / steps,
        "update_s_per_step": (seconds - gen_seconds[0]) / steps,
        "clipped_step_frac": sum(clipped) / max(len(clipped), 1),
        **curve,
        "completion_tokens_mean": sum(r.get("completions/mean_length", 0.0) for r in logs)
        / max(len(logs), 1),
        "model": str(export),
    }


# ---------------------------------------------------------------------------- scoring
def held_out_accuracy(models: list[str], out: Path, tasks: int,
                      recipe: Path = CONFIG) -> list[float]:
    """Greedy pass@1 of each model on the recipe's held-out tasks (``rlvr eval``)."""
    from rlvr.eval.evaluator import evaluate, write_suite
    from rlvr.training.heldout import heldout_entries

    out.mkdir(parents=True, exist_ok=True)
    cfg = quickstart([], recipe)
    entries = heldout_entries(cfg, None, tasks)
    suite = write_suite(entries, out / "eval_suite.yaml")
    results = evaluate(models, suite, samples=1, progress=False,
                       max_new_tokens=cfg.eval.max_new_tokens)
    return [float(m["metrics"]["overall"]["pass@1"]) for m in results["models"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sft", type=Path, nargs="+",
                        default=[REPO / "runs" / "quickstart" / "sft_model"],
                        help="start models (each arm trains from each, with every seed)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--tasks", type=int, default=200, help="held-out tasks scored")
    parser.add_argument("--trl-threads", type=int, default=2,
                        help="torch threads of the TRL arm (2 is its faster setting here)")
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench_vs_trl")
    parser.add_argument("--rlvr", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra overrides of the rlvr arm's config")
    parser.add_argument("--arms", nargs="+", default=["rlvr", "trl"], choices=["rlvr", "trl"])
    parser.add_argument("--config", type=Path, default=CONFIG,
                        help="the recipe both arms run (default the CPU quickstart's); e.g. "
                        "configs/smollm2_quickstart.yaml with --sft <imported SmolLM2 folder>")
    parser.add_argument("--max-load", type=float, default=(os.cpu_count() or 1) + 1.0,
                        help="timing ratios use only the seeds whose runs all began and ended "
                        "under this 1-minute load average (default: CPUs + 1); the gains use all")
    parser.add_argument("--peak-gflops", type=float, default=None,
                        help="the cores' peak FP32 GFLOP/s (default: CPUs x MHz x 32, AVX2 FMA)")
    ns = parser.parse_args()
    for sft in ns.sft:
        if not (sft / "config.json").is_file():
            sys.exit(f"{sft} is not a model directory; run `bash dev.sh quickstart` first (it "
                     "writes runs/quickstart/sft_model) or pass --sft")
    rows: dict[str, list[dict[str, Any]]] = {arm: [] for arm in ns.arms}
    starts: dict[str, float] = {}
    for m, sft in enumerate(ns.sft):
        base_dir = ns.out / f"start{m}"
        base_acc = starts[str(sft)] = held_out_accuracy([str(sft)], base_dir, ns.tasks,
                                                        ns.config)[0]
        for seed in ns.seeds:
            order = ns.arms if seed % 2 == 0 else ns.arms[::-1]
            for arm in order:
                out = base_dir / f"{arm}_seed{seed}"
                load = os.getloadavg()[0]
                row = run_rlvr(sft, out, seed, ns.steps, ns.rlvr, ns.config) if arm == "rlvr" \
                    else run_trl(sft, out, seed, ns.steps, ns.trl_threads, ns.config)
                row.update(throughput(row, sft, ns))
                row["start"], row["seed"], row["load_before"] = str(sft), seed, load
                row["load_after"] = os.getloadavg()[0]
                row["final_accuracy"] = held_out_accuracy([row["model"]], out, ns.tasks,
                                                          ns.config)[0]
                row["gain_points"] = 100 * (row["final_accuracy"] - base_acc)
                rows[arm].append(row)
                print(f"[bench] start {m}, {arm} seed {seed}: {row['rl_seconds']:.1f} s, gain "
                      f"{row['gain_points']:+.1f} points, train reward "
                      f"{row['reward_first']:.2f} -> {row['reward_last']:.2f}, cut "
                      f"{100 * row['cut_first']:.0f}% -> {100 * row['cut_mean']:.0f}% (first 15 "
                      f"steps, all) (load {load:.1f})", flush=True)
    report(rows, starts, ns)


def peak_gflops(ns: Any) -> float:
    """The cores' FP32 peak: CPUs x clock x 32 FLOP/cycle (two 256-bit FMA units), unless given."""
    if ns.peak_gflops:
        return float(ns.peak_gflops)
    mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
           if line.startswith("cpu MHz")]
    return len(mhz) * statistics.mean(mhz) / 1000 * 32


def throughput(row: dict[str, Any], sft: Path, ns: Any) -> dict[str, float]:
    """Tokens/s and achieved FLOP/s of one arm's run, counted the same way for both arms.

    FLOPs per sampled sequence of P prompt + C completion tokens: 2N(P+C) to generate it (prefill
    and decode forwards) and 6N(P+C) to train on it (forward + backward), N the parameters;
    attention's own FLOPs (small at these lengths) are left out.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    cfg = quickstart([], ns.config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(sft))
    n_params = sum(p.numel() for p in model.parameters())
    tokenizer = AutoTokenizer.from_pretrained(sft)
    data = train_dataset(cfg.env.id, dict(cfg.env.kwargs), 64)
    prompt = statistics.mean(len(tokenizer.apply_chat_template(r["prompt"], tokenize=True,
                                                               add_generation_prompt=True,
                                                               return_dict=False))
                             for r in data)
    samples = row["steps"] * cfg.rollout.prompts_per_step * cfg.rollout.group_size
    tokens = samples * (prompt + row["completion_tokens_mean"])
    flops = 8 * n_params * tokens
    return {"params": n_params, "prompt_tokens_mean": prompt,
            "tokens_per_s": tokens / row["rl_seconds"],
            "gflops_per_s": flops / row["rl_seconds"] / 1e9,
            "peak_fraction": flops / row["rl_seconds"] / 1e9 / peak_gflops(ns)}


def mean_and_se(xs: list[float]) -> tuple[float, float]:
    """The mean of ``xs`` and its standard error (0 for one value)."""
    m = statistics.mean(xs)
    return m, (statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0.0)


def quiet_runs(rows: dict[str, list[dict[str, Any]]], max_load: float) -> set[tuple[str, int]]:
    """The (start, seed) pairs whose runs in every arm began and ended under ``max_load``.

    A run beside another job is slower for reasons of its own, so only these are timed; when
    none qualifies, every pair is (and the report says so).
    """
    pairs = {(r["start"], r["seed"]) for rs in rows.values() for r in rs}
    loud = {(r["start"], r["seed"]) for rs in rows.values() for r in rs
            if max(r["load_before"], r.get("load_after", 0.0)) > max_load}
    quiet = pairs - loud
    for start, seed in sorted(loud):
        print(f"[bench] start {start} seed {seed}: a run began or ended above load {max_load:.1f};"
              f" {'left out of' if quiet else 'kept in (no quiet seed)'} the timing ratios")
    return quiet or pairs


def report(rows: dict[str, list[dict[str, Any]]], starts: dict[str, float], ns: Any) -> None:
    def mean(arm: str, key: str) -> float:
        return statistics.mean(r[key] for r in rows[arm])

    cfg = quickstart([], ns.config)
    print(f"\n{ns.config.name}: {ns.steps} steps of {cfg.rollout.prompts_per_step} prompts x "
          f"{cfg.rollout.group_size} samples; seeds {ns.seeds}; start models "
          f"(held-out accuracy on {ns.tasks} tasks): " + ", ".join(
              f"{i}: {100 * acc:.1f}%" for i, acc in enumerate(starts.values())))
    print("| arm | RL time | s/step | rollout s/step | update s/step | clipped steps | "
          "held-out gain (points) by start model | mean gain | tokens/s | GFLOP/s (of peak) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arm, rs in rows.items():
        times = [r["rl_seconds"] for r in rs]
        by_start = "; ".join(" / ".join(f"{r['gain_points']:+.1f}" for r in rs
                                        if r["start"] == start) for start in starts)
        gain, se = mean_and_se([r["gain_points"] for r in rs])
        print(f"| {arm} | {min(times):.1f}-{max(times):.1f} s | "
              f"{mean(arm, 'rl_seconds') / ns.steps:.3f} | "
              f"{mean(arm, 'rollout_s_per_step'):.3f} | {mean(arm, 'update_s_per_step'):.3f} | "
              f"{100 * mean(arm, 'clipped_step_frac'):.0f}% | {by_start} | "
              f"{gain:+.1f} ± {se:.1f} | {mean(arm, 'tokens_per_s'):.0f} | "
              f"{mean(arm, 'gflops_per_s'):.1f} ({100 * mean(arm, 'peak_fraction'):.0f}% of "
              f"{peak_gflops(ns):.0f}) |")
    ratios: dict[str, Any] = {}
    if "rlvr" in rows and "trl" in rows:
        (g_rlvr, se_rlvr), (g_trl, se_trl) = (
            mean_and_se([r["gain_points"] for r in rows[arm]]) for arm in ("rlvr", "trl"))
        timed = quiet_runs(rows, ns.max_load)

        def timed_mean(arm: str, key: str) -> float:
            return statistics.mean(r[key] for r in rows[arm] if (r["start"], r["seed"]) in timed)

        ratios = {
            "steps_per_s": timed_mean("trl", "rl_seconds") / timed_mean("rlvr", "rl_seconds"),
            "rollout": (timed_mean("trl", "rollout_s_per_step")
                        / timed_mean("rlvr", "rollout_s_per_step")),
            "update": (timed_mean("trl", "update_s_per_step")
                       / timed_mean("rlvr", "update_s_per_step")),
            "timed_seeds": sorted(seed for _, seed in timed),
            "gain_points": g_rlvr - g_trl,
            "gain_points_se": (se_rlvr**2 + se_trl**2) ** 0.5,
        }
        print(f"\nrlvr/TRL: {ratios['steps_per_s']:.2f}x steps per second, "
              f"{ratios['rollout']:.2f}x rollout speed, {ratios['update']:.2f}x update speed "
              f"(seeds {ratios['timed_seeds']}); held-out gain {ratios['gain_points']:+.1f} ± "
              f"{ratios['gain_points_se']:.1f} points (rlvr - TRL, mean over all runs ± its "
              "standard error)")
    import trl

    payload = {"rows": rows, "start_accuracy": starts, "ratios_rlvr_over_trl": ratios,
               "steps": ns.steps, "seeds": ns.seeds, "tasks": ns.tasks, "rlvr_overrides": ns.rlvr,
               "config": str(ns.config), "peak_gflops": peak_gflops(ns),
               "trl_threads": ns.trl_threads, "trl": trl.__version__, "torch": torch.__version__,
               "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
               "load_after": os.getloadavg()}
    name = "vs_trl.json" if ns.config.resolve() == CONFIG else f"vs_trl_{ns.config.stem}.json"
    path = REPO / "bench" / "results" / name
    path.write_text(json.dumps(payload, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
