"""The trainer's side pieces: the warm-up's masking, the metrics files, seeds."""

import json
import random

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.config import SFTConfig
from rlvr.metrics import MetricsLogger, read_jsonl
from rlvr.seeds import derived_seed
from rlvr.sft import collate, encode_example, supervised_warmup
from rlvr.trainer import StageTimer, TrainResult, summary


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    return AutoTokenizer.from_pretrained(tiny_model_path)


def test_warm_up_loss_covers_only_the_answer_and_end_of_turn(tokenizer):
    messages = [{"role": "user", "content": "12+7="}]
    ids, prompt_len = encode_example(tokenizer, messages, "19")
    assert tokenizer.decode(ids[:prompt_len]).endswith("<|im_start|>assistant\n")
    assert tokenizer.convert_ids_to_tokens(ids[prompt_len:]) == ["1", "9", "<|im_end|>"]
    short, short_len = encode_example(tokenizer, messages, "7")
    input_ids, attention, loss_mask = collate([(ids, prompt_len), (short, short_len)],
                                              tokenizer.pad_token_id)
    assert input_ids.shape == (2, len(ids)) and attention[1].sum() == len(short)
    targets = [input_ids[r, 1:][loss_mask[r].bool()].tolist() for r in range(2)]
    assert targets == [ids[prompt_len:], short[short_len:]]


def test_collate_pads_right_and_masks_exactly_the_trained_positions():
    """Property test over random ragged rows, prompt lengths and per-token masks alike."""
    rng = random.Random(0)
    for _ in range(200):
        rows = []
        for _ in range(rng.randint(1, 6)):
            n = rng.randint(2, 12)
            ids = [rng.randint(0, 50) for _ in range(n)]
            kind = rng.random() < 0.5
            rows.append((ids, rng.randint(1, n) if kind else [rng.randint(0, 1) for _ in ids]))
        input_ids, attention, loss_mask = collate(rows, pad_token_id=99)
        width = max(len(ids) for ids, _ in rows)
        assert input_ids.shape == attention.shape == (len(rows), width)
        assert loss_mask.shape == (len(rows), width - 1) and loss_mask.dtype == torch.float
        for r, (ids, how) in enumerate(rows):
            n = len(ids)
            assert input_ids[r].tolist() == ids + [99] * (width - n)
            assert attention[r].tolist() == [1] * n + [0] * (width - n)
            trained = [float(t >= how) for t in range(1, n)] if isinstance(how, int) else \
                [float(m) for m in how[1:]]  # position t predicts token t + 1
            assert loss_mask[r].tolist() == trained + [0.0] * (width - n)


def test_warm_up_memoised_encoder_gives_encode_examples_ids(tokenizer):
    from rlvr.sft import MemoEncoder

    encode = MemoEncoder(tokenizer)
    rng = random.Random(0)
    stream = []
    for _ in range(40):  # repeats of openings and answers come from the cache
        a, b = rng.randint(0, 5), rng.randint(0, 5)
        system = [{"role": "system", "content": "add"}] if rng.random() < 0.5 else []
        stream.append((system + [{"role": "user", "content": f"{a}+{b}="}], str(a + b)))
    for messages, answer in stream:
        assert encode(messages, answer) == encode_example(tokenizer, messages, answer)
    assert len(encode._prompts) < len(stream)


def test_exact_match_rate_is_the_share_of_answers_greedy_decoding_reproduces(tiny_model_path,
                                                                             tokenizer):
    """The teacher-forced check counts exactly the rows whose gold answer greedy generation
    reproduces token for token: two memorised examples out of five."""
    from rlvr.sft import exact_match_rate

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    rows = [encode_example(tokenizer, [{"role": "user", "content": f"{a}+{a}="}], str(2 * a))
            for a in range(5)]
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    memorised = collate(rows[:2], tokenizer.pad_token_id)
    from rlvr.sft import answer_loss

    model.train()
    for _ in range(80):
        optim.zero_grad()
        answer_loss(model, memorised).backward()
        optim.step()
    model.eval()
    greedy = []
    for ids, prompt_len in rows:
        out = model.generate(torch.tensor([ids[:prompt_len]]), do_sample=False,
                             max_new_tokens=len(ids) - prompt_len,
                             pad_token_id=tokenizer.pad_token_id)
        greedy.append(out[0, prompt_len:].tolist() == ids[prompt_len:])
    assert greedy[:2] == [True, True] and sum(greedy) < 5
    assert exact_match_rate(model, collate(rows, tokenizer.pad_token_id)) == sum(greedy) / 5


def test_warm_up_lowers_the_loss_and_stops_at_the_target(tiny_model_path, tokenizer):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)

    def example(rng: random.Random):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return [{"role": "user", "content": f"{a}+{b}="}], str(a + b)

    calls = []

    def evaluate():
        calls.append(1)
        return 0.5 if len(calls) >= 2 else 0.0

    config = SFTConfig(enabled=True, max_steps=30, batch_size=8, lr=3e-3, eval_every=5,
                       target_accuracy=0.4)
    result = supervised_warmup(model, tokenizer, example, config, seed=0, evaluate=evaluate,
                               log=lambda _: None)
    assert result.steps == 10 and result.accuracy == 0.5
    assert result.history == [(5, 0.0), (10, 0.5)]
    first = supervised_warmup(model, tokenizer, example,
                              SFTConfig(enabled=True, max_steps=1, batch_size=8, lr=1e-9),
                              seed=1, log=lambda _: None)
    assert first.loss < 3.0  # the format is learned: the untrained loss is ln(404) ~ 6


def test_training_forward_counts_the_exact_rows_as_exact_match_rate_does(tiny_model_path,
                                                                        tokenizer):
    """The free count the check gate reads equals the held-out check's count on one batch."""
    from rlvr.sft import answer_loss, answer_loss_and_exact, exact_match_rate

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    rows = [encode_example(tokenizer, [{"role": "user", "content": f"{a}+{a}="}], str(2 * a))
            for a in range(6)]
    batch = collate(rows, tokenizer.pad_token_id)
    optim = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):  # memorise half the rows, so the count is neither 0 nor all
        optim.zero_grad()
        answer_loss(model, collate(rows[:3], tokenizer.pad_token_id)).backward()
        optim.step()
    model.eval()
    loss, exact = answer_loss_and_exact(model, batch)
    assert 0 < int(exact) < 6
    assert int(exact) / 6 == exact_match_rate(model, batch)
    assert torch.allclose(loss, answer_loss(model, batch)) and not exact.requires_grad


def _full_logits_loss(model, batch):
    """The warm-up loss as a forward over every position computes it (the reference)."""
    input_ids, attention_mask, loss_mask = batch
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    ce = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), input_ids[:, 1:].reshape(-1), reduction="none",
    ).view_as(loss_mask)
    return (ce * loss_mask).sum() / loss_mask.sum()


class _NoLogitsToKeep(torch.nn.Module):
    """A causal LM whose forward takes no ``logits_to_keep`` (an older or custom model)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask)


def test_warm_up_loss_on_the_kept_columns_equals_the_full_forwards_loss_and_gradient(
        tiny_model_path, tokenizer):
    """Prompts of different lengths and a multi-turn mask with a gap: the loss asks the model
    for the trained columns' logits only; loss and gradients equal the all-positions forward's,
    with and without ``logits_to_keep`` in the model's forward."""
    from rlvr.sft import answer_loss_and_exact

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path, dtype=torch.float64)
    rows = [encode_example(tokenizer, [{"role": "user", "content": q}], a)
            for q, a in [("3+4=", "7"), ("61+86=", "147"), ("12+7=", "19")]]
    ids, _ = rows[1]
    mask = [0] * len(ids)
    mask[3:6] = [1, 1, 1]
    mask[-2:] = [1, 1]  # two trained spans with untrained tokens between them
    batch = collate([*rows, (ids, mask)], tokenizer.pad_token_id)
    assert 0 < int(batch[2].any(0).sum()) < batch[2].shape[1]  # some columns are dropped
    grads = []
    for m in (model, _NoLogitsToKeep(model), None):
        model.zero_grad()
        loss = _full_logits_loss(model, batch) if m is None else answer_loss_and_exact(m, batch)[0]
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (kept, g_kept), (cut, g_cut), (full, g_full) = grads
    # the warm-up's cross-entropy runs in float32 (logits.float()), the reference in float64
    assert torch.allclose(kept.double(), full, rtol=1e-6)
    assert torch.allclose(cut.double(), full, rtol=1e-6)
    for a, b, c in zip(g_kept, g_cut, g_full, strict=True):
        assert torch.allclose(a, c, rtol=1e-5, atol=1e-8)
        assert torch.allclose(b, c, rtol=1e-5, atol=1e-8)


def _counting_examples():
    def example(rng: random.Random):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return [{"role": "user", "content": f"{a}+{b}="}], str(a + b)
    return example


def test_check_gate_skips_checks_while_training_batches_are_far_from_the_target(
        tiny_model_path, tokenizer):
    """Gate 1.0 with a target no 10-step-old model reaches: every due check but the last is
    skipped (and logged as skipped); gate 0 checks every time."""
    calls: list[int] = []
    lines: list[str] = []
    config = SFTConfig(enabled=True, max_steps=12, batch_size=4, lr=1e-4, eval_every=3,
                       target_accuracy=1.0, check_gate=1.0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    result = supervised_warmup(model, tokenizer, _counting_examples(), config, seed=0,
                               evaluate=lambda: calls.append(1) or 0.0, log=lines.append)
    assert len(calls) == 1 and result.history == [(12, 0.0)]
    assert sum("check skipped" in line for line in lines) == 3
    ungated = SFTConfig(enabled=True, max_steps=12, batch_size=4, lr=1e-4, eval_every=3,
                        target_accuracy=1.0)
    calls.clear()
    supervised_warmup(model, tokenizer, _counting_examples(), ungated, seed=0,
                      evaluate=lambda: calls.append(1) or 0.0, log=lambda _: None)
    assert len(calls) == 4


def test_an_open_check_gate_changes_nothing(tiny_model_path, tokenizer):
    """Training batches the model already gets exactly right keep the gate open: a gated run
    checks at the same steps as an ungated one and ends with the same weights."""
    from rlvr.sft import answer_loss

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    example = ([{"role": "user", "content": "3+4="}], "7")
    memorised = collate([encode_example(tokenizer, *example)], tokenizer.pad_token_id)
    optim = torch.optim.AdamW(base.parameters(), lr=3e-3)
    base.train()
    for _ in range(60):
        optim.zero_grad()
        answer_loss(base, memorised).backward()
        optim.step()
    state = {k: v.clone() for k, v in base.state_dict().items()}
    runs = []
    for gate in (0.0, 1.0):
        base.load_state_dict(state)
        calls: list[int] = []
        config = SFTConfig(enabled=True, max_steps=10, batch_size=4, lr=1e-6, eval_every=2,
                           target_accuracy=1.0, check_gate=gate)
        result = supervised_warmup(base, tokenizer, lambda rng: example, config, seed=0,
                                   evaluate=lambda c=calls: c.append(1) or 0.0,
                                   log=lambda _: None)
        runs.append((result.history, len(calls), base.lm_head.weight.detach().clone()))
    (plain, n_plain, w_plain), (gated, n_gated, w_gated) = runs
    assert n_plain == n_gated == 5 and gated == plain
    assert torch.equal(w_plain, w_gated)


def test_metrics_logger_drops_steps_after_a_resume_point_and_draws_curves(tmp_path):
    log = MetricsLogger(tmp_path, total_steps=4, progress=False, tensorboard=True)
    for step in range(1, 5):
        log.log(step, {"reward/mean": step / 4, "reward/accuracy": step / 8})
    log.log(4, {"eval/accuracy": 0.5})
    assert log.close() == tmp_path / "curves.png"
    assert (tmp_path / "curves.png").stat().st_size > 1000
    assert any((tmp_path / "tensorboard").iterdir())
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write('{"step": 5, "reward/m')  # a torn line, as a killed process leaves
    resumed = MetricsLogger(tmp_path, total_steps=4, start_step=2, progress=False,
                            tensorboard=False, plot=False)
    resumed.log(3, {"reward/mean": float("nan")})
    resumed.close()
    rows = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["reward/mean"] is None
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["step"] == 1


def test_disabled_logger_writes_nothing(tmp_path):
    log = MetricsLogger(tmp_path / "rank1", total_steps=2, enabled=False)
    log.log(1, {"reward/mean": 1.0})
    assert log.close() is None and not (tmp_path / "rank1").exists()


def test_seeds_timer_and_summary():
    assert derived_seed(0, "task", 3, 1) == derived_seed(0, "task", 3, 1)
    assert derived_seed(0, "task", 3, 1) != derived_seed(0, "task", 3, 2)
    timer = StageTimer()
    with timer("rollout"):
        pass
    assert set(timer.metrics()) == {"time/rollout", "time/step"}
    text = summary(TrainResult(output_dir=None, metrics_path="m.jsonl", warmup_accuracy=0.3,
                               final_accuracy=0.72, steps=5, sft_steps=10))
    assert "30.0% before RL -> 72.0% after RL (+42.0 points)" in text
    assert "metrics:     m.jsonl" in text
