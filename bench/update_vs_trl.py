"""rlvr's update and TRL's on the very same batch: the same loss and the same gradient.

`bench/bench_vs_trl.py` compares whole runs, whose held-out gains differ by chance (each arm
samples its own episodes). This takes the chance out: one step's episodes are played once, by
rlvr (the quickstart's config on the given start model), and both learners score them.

- rlvr: ``Trainer.prepare`` (old logprobs, Dr. GRPO advantages) and ``Trainer.update`` (its
  loss, backward; the gradient is read before clipping);
- TRL: ``GRPOTrainer.compute_loss`` on the same prompt and completion tokens (left-padded prompts,
  right-padded completions, as TRL's own generation hands them over), with TRL's Dr. GRPO
  advantages (reward minus group mean, ``scale_rewards="none"``) computed here from the
  episodes' rewards, then ``backward``.

Prints rlvr's and TRL's advantages, loss and gradient norm and the largest difference over every
parameter's gradient, writes ``bench/results/update_vs_trl.json``, and exits 1 when the
gradients differ by more than ``--rtol`` of the gradient norm. Two checks of the sampling beside
it (the update is only the same in expectation if the episodes are drawn alike): the engine's
first-token frequencies against the model's softmax, and groups of 8 sampled by the engine and
by HF ``generate`` (TRL's sampler) on the same tasks: how many groups carry no signal (all 8
rewards equal), distinct completions, accuracy.

    .venv/bin/python bench/update_vs_trl.py --sft runs/quickstart/sft_model
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import rlvr  # noqa: F401  # before torch: the OpenMP wait policy of `rlvr train`

# isort: split
import torch
from bench_vs_trl import REPO, TaskReward, quickstart, train_dataset, trl_recipe

RESULTS = REPO / "bench" / "results" / "update_vs_trl.json"


def rlvr_step(sft: Path, out: Path, seed: int) -> tuple[list[Any], dict[str, torch.Tensor],
                                                      torch.Tensor, float]:
    """One rlvr rollout and update: the episodes, the pre-clip gradient, advantages, loss."""
    from rlvr.batch import RolloutBatch
    from rlvr.trainer import Trainer

    config = quickstart([
        f"model.path={sft}", "sft.enabled=false", f"trainer.output_dir={out}",
        f"trainer.seed={seed}", "trainer.steps=1", "eval.every=0", "trainer.checkpoint_every=0",
        "trainer.progress=false", "trainer.tensorboard=false", "trainer.plot=false",
        "rollout.open_ahead=false",
    ])
    trainer = Trainer(config, log=lambda *_: None)
    try:
        trajs, _ = trainer.stream.collect(1, 0)
        batch = RolloutBatch.from_trajectories(trajs, trainer.pad_id)
        trainer.prepare(batch)
        grads: dict[str, torch.Tensor] = {}
        actor = trainer.actor
        clip_and_step = actor._clip_and_step

        def capture() -> float:
            for name, p in actor.module.named_parameters():
                if p.grad is not None:
                    grads[name] = p.grad.detach().clone()
            return clip_and_step()

        actor._clip_and_step = capture  # type: ignore[method-assign]
        metrics = trainer.update(batch)
        # One advantage per row: Dr. GRPO's is constant over the row's response tokens.
        mask = batch.response_mask.bool()
        adv = torch.stack([a[m][0] if m.any() else a.new_zeros(()) for a, m in
                           zip(batch.require("advantages"), mask)])
        return trajs, grads, adv, float(metrics["actor/pg_loss"])
    finally:
        trainer.close()


def trl_step(sft: Path, out: Path, trajs: list[Any]) -> tuple[dict[str, torch.Tensor],
                                                          torch.Tensor, float, int]:
    """TRL's loss and gradient on ``trajs``' tokens (no generation: the episodes are given).

    Also returns how many episodes' prompts TRL renders to exactly rlvr's prompt tokens.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    cfg = quickstart([])
    env_kwargs = dict(cfg.env.kwargs)
    group = cfg.rollout.group_size
    model = AutoModelForCausalLM.from_pretrained(sft, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(sft)
    args = trl_recipe(cfg, out, seed=0, steps=1)  # the TRL arm's own settings
    trainer = GRPOTrainer(model=model, reward_funcs=[TaskReward(cfg.env.id, env_kwargs)],
                          args=args, train_dataset=train_dataset(cfg.env.id, env_kwargs, 8),
                          processing_class=tokenizer)
    pad = tokenizer.pad_token_id
    width_p = max(len(t.prompt_ids) for t in trajs)
    width_c = max(len(t.response_ids) for t in trajs)

    def rows(seqs: list[list[int]], width: int, left: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            cols = slice(width - len(s), width) if left else slice(0, len(s))
            ids[i, cols], mask[i, cols] = torch.tensor(s), 1
        return ids, mask

    # TRL's own rendering of each episode's opening messages must give rlvr's prompt tokens.
    openings = [[dict(m) for m in t.metadata["messages"] if m["role"] != "assistant"]
                for t in trajs]
    trl_prompts = trainer._tokenize_prompts(openings)[0]
    rendered_alike = sum(list(a) == t.prompt_ids for a, t in zip(trl_prompts, trajs))
    prompt_ids, prompt_mask = rows([t.prompt_ids for t in trajs], width_p, left=True)
    completion_ids, completion_mask = rows([t.response_ids for t in trajs], width_c, left=False)
    ids = [t.group_id for t in trajs]
    if any(ids[i] != ids[i - i % group] for i in range(len(ids))):
        raise RuntimeError("the episodes of a group are not contiguous")
    rewards = torch.tensor([t.reward for t in trajs])
    grouped = rewards.view(-1, group)  # the stream yields each group's episodes together
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask,
              "completion_ids": completion_ids, "completion_mask": completion_mask,
              "advantages": advantages, "num_items_in_batch": completion_mask.sum()}
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train's loop
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()
             if p.grad is not None}
    return grads, advantages, float(loss.detach()), rendered_alike


def sampling_check(sft: Path, prompt_ids: list[int], draws: int, seed: int) -> tuple[float, float]:
    """Total-variation distance of the engine's first-token draws from the model's softmax.

    ``draws`` seeded one-token requests on the quickstart's rollout engine, seeded as the runner
    seeds turns; beside it the distance of as many ``torch.multinomial`` draws (what TRL's
    ``generate`` samples with), so the two distances compare on the same noise floor.
    """
    import asyncio

    from transformers import AutoModelForCausalLM

    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.agents.runner import turn_seed

    model = AutoModelForCausalLM.from_pretrained(sft, dtype=torch.float32).eval()
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([prompt_ids])).logits[0, -1].double(), -1)
    engine = TransformersEngine(sft, max_batch_size=128, threads=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=1)

    async def draw() -> list[int]:
        outs = await asyncio.gather(*(
            engine.generate(prompt_ids, params.seeded(turn_seed(seed, i, 0)))
            for i in range(draws)))
        return [o.token_ids[0] for o in outs]

    try:
        tokens = asyncio.run(draw())
    finally:
        engine.close()
    gen = torch.Generator().manual_seed(seed)
    reference = torch.multinomial(probs, draws, replacement=True, generator=gen)

    def tv(ids: Any) -> float:
        counts = torch.bincount(torch.as_tensor(ids), minlength=probs.numel()).double()
        return 0.5 * (counts / draws - probs).abs().sum().item()

    return tv(tokens), tv(reference)


def group_check(sft: Path, tasks: int, seed: int) -> dict[str, tuple[float, float, float]]:
    """Groups of 8 on the first ``tasks`` training tasks, sampled by the engine and by HF.

    Per sampler: the share of groups whose 8 rewards are all equal (no GRPO signal), distinct
    completions per group, and accuracy. The engine's requests are seeded as the trainer seeds
    them; HF's ``generate`` (TRL's sampler) runs on left-padded batches of 16 prompts x 8. A
    completion scores only when it ended its turn within the 6 tokens (rlvr's rule, for both).
    """
    import asyncio

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.agents.engine import SamplingParams
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.agents.runner import turn_seed
    from rlvr.seeds import derived_seed

    cfg = quickstart([])
    group, budget = cfg.rollout.group_size, cfg.rollout.runner.max_tokens_per_turn
    reward = TaskReward(cfg.env.id, dict(cfg.env.kwargs))
    tokenizer = AutoTokenizer.from_pretrained(sft)
    eos = tokenizer.eos_token_id
    prompts = []
    for i in range(tasks):
        messages, _ = reward.env.reset(options={"task_index": i})
        prompts.append(list(tokenizer.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=True, tokenize=True,
            return_dict=True)["input_ids"]))

    def stats(samples: list[list[list[int]]]) -> tuple[float, float, float]:
        flat, distinct, scores = 0, 0.0, []
        for i, completions in enumerate(samples):
            texts = [tokenizer.decode(c[:c.index(eos)]) if eos in c else None
                     for c in completions]
            rs = [0.0 if t is None else reward([None], [t], [i])[0] for t in texts]
            flat += len(set(rs)) == 1
            distinct += len({tuple(c) for c in completions})
            scores += rs
        return flat / len(samples), distinct / len(samples), sum(scores) / len(scores)

    engine = TransformersEngine(sft, max_batch_size=128, threads=1)
    params = SamplingParams(temperature=1.0, max_new_tokens=budget)

    async def engine_groups() -> list[list[list[int]]]:
        outs = await asyncio.gather(*(
            engine.generate(p, params.seeded(turn_seed(derived_seed(seed, "sample", 1, j), i, 0)))
            for j, p in enumerate(prompts) for i in range(group)))
        return [[list(o.token_ids) for o in outs[j * group:(j + 1) * group]]
                for j in range(tasks)]

    try:
        ours = asyncio.run(engine_groups())
    finally:
        engine.close()
    model = AutoModelForCausalLM.from_pretrained(sft, dtype=torch.float32).eval()
    torch.manual_seed(seed)
    theirs: list[list[list[int]]] = []
    pad = tokenizer.pad_token_id
    for j in range(0, tasks, 16):
        batch = prompts[j:j + 16]
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in batch])
        mask = (torch.arange(width) >= torch.tensor([width - len(p) for p in batch])[:, None]
                ).long()
        with torch.no_grad():
            out = model.generate(input_ids=ids.repeat_interleave(group, 0),
                                 attention_mask=mask.repeat_interleave(group, 0), do_sample=True,
                                 temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=budget,
                                 pad_token_id=pad, eos_token_id=eos)
        rows = out[:, width:].tolist()
        theirs += [rows[k * group:(k + 1) * group] for k in range(len(batch))]
    return {"engine": stats(ours), "HF generate": stats(theirs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sft", type=Path, default=REPO / "runs" / "quickstart" / "sft_model")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--draws", type=int, default=8192,
                        help="first-token draws of the sampling check")
    parser.add_argument("--groups", type=int, default=400,
                        help="training tasks of the group check (8 samples each)")
    parser.add_argument("--rtol", type=float, default=1e-4,
                        help="largest gradient difference allowed, as a share of the norm")
    ns = parser.parse_args()
    if not (ns.sft / "config.json").is_file():
        sys.exit(f"{ns.sft} is not a model directory; run `bash dev.sh quickstart` first or "
                 "pass --sft")
    with tempfile.TemporaryDirectory() as tmp:
        trajs, g_rlvr, adv_rlvr, loss_rlvr = rlvr_step(ns.sft, Path(tmp) / "rlvr", ns.seed)
        g_trl, adv_trl, loss_trl, alike = trl_step(ns.sft, Path(tmp) / "trl", trajs)
    tv_engine, tv_multinomial = sampling_check(ns.sft, trajs[0].prompt_ids, ns.draws, ns.seed)
    by_sampler = group_check(ns.sft, ns.groups, ns.seed)
    names = sorted(set(g_rlvr) | set(g_trl))
    missing = [n for n in names if n not in g_rlvr or n not in g_trl]
    norm = torch.sqrt(sum((g_trl[n].double() ** 2).sum() for n in g_trl)).item()
    norm_rlvr = torch.sqrt(sum((g_rlvr[n].double() ** 2).sum() for n in g_rlvr)).item()
    diffs = {n: (g_rlvr[n].double() - g_trl[n].double()).abs().max().item()
             for n in names if n not in missing}
    worst = max(diffs, key=diffs.get)  # type: ignore[arg-type]
    adv_diff = (adv_rlvr.double() - adv_trl.double()).abs().max().item()
    print(f"{len(trajs)} episodes, rewards mean {sum(t.reward for t in trajs) / len(trajs):.3f}")
    print(f"prompts TRL renders to rlvr's tokens: {alike} of {len(trajs)}")
    print("| | rlvr | TRL | largest difference |")
    print("|---|---|---|---|")
    print(f"| advantages (per row) | {adv_rlvr.abs().mean():.4f} mean abs | "
          f"{adv_trl.abs().mean():.4f} mean abs | {adv_diff:.2e} |")
    print(f"| loss | {loss_rlvr:.6e} | {loss_trl:.6e} | {abs(loss_rlvr - loss_trl):.2e} |")
    print(f"| gradient norm | {norm_rlvr:.6f} | {norm:.6f} | {abs(norm_rlvr - norm):.2e} |")
    print(f"| gradient, {len(diffs)} tensors | | | {diffs[worst]:.2e} ({worst}), "
          f"{diffs[worst] / norm:.1e} of the norm |")
    print(f"| first-token sampling, {ns.draws} draws: TV distance from the softmax | "
          f"{tv_engine:.4f} (engine) | {tv_multinomial:.4f} (torch.multinomial) | |")
    for name, (flat, distinct, acc) in by_sampler.items():
        print(f"| groups of 8 on {ns.groups} tasks, {name} | {100 * flat:.1f}% all-equal "
              f"rewards | {distinct:.2f} distinct completions | accuracy {100 * acc:.1f}% |")
    if missing:
        print(f"parameters with a gradient on one side only: {missing}")
    same = (alike == len(trajs) and not missing and adv_diff < 1e-6
            and diffs[worst] <= ns.rtol * norm and tv_engine < 2 * tv_multinomial + 0.01)
    print("same update" if same else "DIFFERENT update")
    import trl

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "sft": str(ns.sft), "seed": ns.seed, "episodes": len(trajs),
        "prompts_rendered_alike": alike, "advantage_max_diff": adv_diff,
        "loss": {"rlvr": loss_rlvr, "trl": loss_trl},
        "grad_norm": {"rlvr": norm_rlvr, "trl": norm},
        "grad_max_diff": diffs[worst], "grad_max_diff_tensor": worst,
        "first_token_tv": {"engine": tv_engine, "torch.multinomial": tv_multinomial,
                           "draws": ns.draws},
        "groups": {name: dict(zip(("all_equal_share", "distinct", "accuracy"), v))
                   for name, v in by_sampler.items()},
        "same_update": same, "trl": trl.__version__, "torch": torch.__version__,
    }, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    sys.exit(0 if same else 1)


if __name__ == "__main__":
    main()
