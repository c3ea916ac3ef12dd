"""report.md, plots, episodes.jsonl and episodes.html from hand-made episode records."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from rlvr.eval.episodes import episode_record, read_episodes, segments, write_episodes
from rlvr.eval.html import render_html, write_html
from rlvr.eval.metrics import aggregate, summarize
from rlvr.eval.plots import write_plots
from rlvr.eval.report import format_delta, render_report, summary_table
from rlvr.trajectory import EpisodeOutcome, Trajectory
from rlvr.verifiers import Verdict


def decode(ids: list[int]) -> str:
    return "".join(chr(ord("a") + (i % 26)) for i in ids)


def make_traj(task: str, passed: bool, answer: str | None, *, finish: str = "stop") -> Trajectory:
    # prompt, model turn (3 tokens), env feedback (2 tokens), model turn (2 tokens)
    scores = [0.0, 0.0, 0.25, 0.0, 0.0, 0.0, 1.0 if passed else 0.0]
    return Trajectory(
        prompt_ids=[1, 2],
        response_ids=[3, 4, 5, 6, 7, 8, 9],
        response_mask=[1, 1, 1, 0, 0, 1, 1],
        rollout_logprobs=[-0.1] * 7,
        token_level_scores=scores,
        group_id=task,
        env_id="rlvr/Math-v0",
        task_id=task,
        finish_reason=finish,
        outcome=EpisodeOutcome(
            turns=2,
            tool_calls=2,
            tool_errors=1,
            verdict=Verdict(
                1.0 if passed else 0.0,
                passed,
                "correct" if passed else "wrong_answer",
                {"extracted": answer},
            ),
            answer=answer,
        ),
        metadata={"messages": [{"role": "user", "content": "1+1?"}]},
    )


def records_for(model: str, outcomes: dict[str, list[tuple[bool, str | None]]]) -> list[dict]:
    out = []
    for task, samples in outcomes.items():
        for s, (passed, answer) in enumerate(samples):
            traj = make_traj(task, passed, answer)
            out.append(episode_record(traj, model=model, env="math", sample=s, decode=decode))
    return out


BASE = {
    "t0": [(True, "2"), (False, "3"), (True, "2.0")],
    "t1": [(False, "5"), (False, "5"), (True, "4")],
}
BETTER = {
    "t0": [(True, "2"), (True, "2"), (True, "2")],
    "t1": [(True, "4"), (False, "5"), (True, "4")],
}


def results_for(records_by_model: dict[str, list[dict]], samples: int = 3) -> dict:
    return {
        "config": {
            "suite": "unit",
            "samples": samples,
            "temperature": 1.0,
            "max_turns": 2,
            "seed": 0,
            "engine": "transformers",
        },
        "envs": ["math"],
        "models": [
            {"label": label, "path": f"/ckpt/{label}", "metrics": aggregate(recs, samples)}
            for label, recs in records_by_model.items()
        ],
    }


def test_segments_and_turn_rewards() -> None:
    segs, turns = segments([1], [3, 4, 5, 6], [1, 1, 0, 1], [0.0, 0.5, 0.0, 1.0], decode)
    assert [s["kind"] for s in segs] == ["prompt", "model", "env", "model"]
    assert [s["text"] for s in segs] == ["b", "de", "f", "g"]
    assert turns == [0.5, 1.0]


def test_record_fields() -> None:
    rec = records_for("m", {"t0": [(True, " 2.0 ")]})[0]
    assert rec["answer"] == "2"
    assert rec["reward"] == pytest.approx(1.25)
    assert rec["turn_rewards"] == pytest.approx([0.25, 1.0])
    assert rec["model_tokens"] == 5
    assert rec["passed"] is True and rec["verdict_reason"] == "correct"


def test_summarize_numbers() -> None:
    m = summarize(records_for("m", BASE), samples=3)
    assert m["tasks"] == 2 and m["episodes"] == 6
    # t0: c=2 of 3, t1: c=1 of 3
    assert m["pass@1"] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert m["pass@2"] == pytest.approx((1.0 + 2 / 3) / 2)
    assert m["pass@3"] == pytest.approx(1.0)
    assert m["mean@3"] == pytest.approx(0.5)
    # t0 majority "2" (normalised "2.0" -> "2") passes; t1 majority "5" fails
    assert m["maj@3"] == pytest.approx(0.5)
    assert m["tool/valid_call_rate"] == pytest.approx(0.5)
    assert m["tool/calls_per_episode"] == pytest.approx(2.0)
    assert m["mean_turns"] == pytest.approx(2.0)
    assert m["mean_response_tokens"] == pytest.approx(5.0)
    assert m["finish_reasons"] == {"stop": 6}
    assert m["tool/episodes_with_call"] == 1.0 and m["tool/accuracy_with_call"] == 0.5


def test_summarize_accuracy_of_tool_calling_episodes() -> None:
    recs = records_for("m", BASE)  # passed: True, False, True (t0); False, False, True (t1)
    for rec in recs[:2] + recs[5:]:
        rec["tool_calls"] = 0  # without a call: two right answers, one wrong; with: 1 of 3
    m = summarize(recs, samples=3)
    assert m["tool/episodes_with_call"] == pytest.approx(3 / 6)
    assert m["tool/accuracy_with_call"] == pytest.approx(1 / 3)
    assert m["tool/accuracy_without_call"] == pytest.approx(2 / 3)
    for rec in recs:
        rec["tool_calls"] = 0
    m = summarize(recs, samples=3)
    assert m["tool/episodes_with_call"] == 0.0 and m["tool/accuracy_with_call"] is None


def test_summarize_counts_failures() -> None:
    recs = [
        episode_record(
            make_traj("a", False, None, finish="error"), model="m", env="e", sample=0, decode=decode
        ),
        episode_record(
            make_traj("a", False, None, finish="length"),
            model="m",
            env="e",
            sample=1,
            decode=decode,
        ),
    ]
    recs[1]["verdict_reason"] = "timeout"
    m = summarize(recs, samples=2)
    assert (m["errors"], m["truncated"], m["timeouts"]) == (1, 1, 1)
    recs[0]["error"] = "TimeoutError: step took longer than env_step_timeout_s=60.0"
    assert summarize(recs, samples=2)["timeouts"] == 2
    assert m["maj@2"] is None  # no answers to compare


def test_report_side_by_side_with_deltas(tmp_path: Path) -> None:
    results = results_for(
        {"base": records_for("base", BASE), "better": records_for("better", BETTER)}
    )
    text = render_report(results)
    assert "| metric | base | better | Δ better |" in text
    # pass@1: base 0.5, better 5/6 -> +0.333
    assert "| pass@1 | 0.500 | 0.833 | +0.333 |" in text
    assert "| maj@3 | 0.500 | 1.000 | +0.500 |" in text
    table = summary_table(results)
    header = "| env | pass@1 base | pass@1 better | pass@1 Δ better |"
    assert table.splitlines()[0].startswith(header)
    assert "| math | 0.500 | 0.833 | +0.333 | 1.000 | 1.000 | 0.000 |" in table
    assert format_delta(3, 5) == "-2" and format_delta(None, 1.0) == "n/a"

    plots = write_plots(results, tmp_path)
    assert set(plots) == {"math"}  # one env: an overall chart would repeat it
    for rel in plots.values():
        data = (tmp_path / rel).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


class _Checker(HTMLParser):
    VOID = {"meta", "br", "img", "link", "input", "hr"}

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.classes: set[str] = set()
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "class" and value:
                self.classes.update(value.split())
            if name in ("src", "href"):
                self.external.append(str(value))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()


def test_html_well_formed_and_self_contained(tmp_path: Path) -> None:
    recs = records_for("base", BASE)
    recs[0]["segments"][1]["text"] = "<script>alert('x')</script> & </details> \x05"
    path = write_html(recs, tmp_path / "episodes.html")
    text = path.read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert checker.stack == []
    assert checker.external == []
    assert "http://" not in text and "https://" not in text
    assert {"prompt", "model", "env", "badge"} <= checker.classes
    assert "<script>" not in text  # model text is escaped
    assert "\x05" not in text and "\\x05" in text  # control characters are shown, not emitted
    assert text.count("<details><summary>task ") == len(recs)
    assert "r=1.000" in text and "r=0.250" in text


def test_episodes_jsonl_round_trip(tmp_path: Path) -> None:
    recs = records_for("base", BASE)
    path = write_episodes(recs, tmp_path / "episodes.jsonl")
    back = read_episodes(path)
    assert back == recs
    assert summarize(back, 3) == summarize(recs, 3)
    assert "<html" in render_html(back)


def test_overall_maj_pools_only_envs_with_answers() -> None:
    recs = records_for("m", BASE)  # maj@3 = 0.5 on env "math"
    for task in ("c0", "c1"):
        for s in range(3):
            rec = episode_record(
                make_traj(task, True, None), model="m", env="code", sample=s, decode=decode
            )
            recs.append(rec)
    metrics = aggregate(recs, 3)
    assert metrics["code"]["maj@3"] is None
    assert metrics["overall"]["maj@3"] == pytest.approx(0.5)
    assert metrics["overall"]["tasks"] == 4


def test_tool_validity_only_where_the_env_checks_calls() -> None:
    traj = make_traj("a", False, None)
    traj.outcome.tool_errors = None  # an env without tools: calls were only seen in text
    rec = episode_record(traj, model="m", env="e", sample=0, decode=decode)
    assert rec["tool_call_errors"] is None
    m = summarize([rec], samples=1)
    assert m["tool/calls_per_episode"] == 2 and m["tool/valid_call_rate"] is None


def test_training_accuracy_and_eval_pass1_agree_on_the_same_episodes() -> None:
    """One definition of "passed": ``reward/accuracy`` equals eval pass@1 episode for episode."""
    import torch

    from rlvr.metrics import rollout_metrics

    def traj(task: str, reward: float, verdict: Verdict | None, finish: str = "stop") -> Trajectory:
        return Trajectory(prompt_ids=[1], response_ids=[2, 3], response_mask=[1, 1],
                          rollout_logprobs=[0.0, 0.0], token_level_scores=[0.0, reward],
                          task_id=task, finish_reason=finish,
                          outcome=EpisodeOutcome(verdict=verdict, turns=1))

    trajs = [
        traj("right", 1.0, Verdict(1.0, True, "correct")),
        traj("wrong_with_format_reward", 0.1, Verdict(0.0, False, "wrong_answer")),
        traj("no_verdict_rewarded", 1.0, None),  # a third-party env that only rewards
        traj("no_verdict_unrewarded", 0.0, None),
        traj("passed_then_error", 0.0, Verdict(1.0, True, "correct"), finish="error"),
    ]
    assert [t.passed for t in trajs] == [True, False, True, False, False]
    records = [episode_record(t, model="m", env="e", sample=0, decode=decode) for t in trajs]
    pass1 = summarize(records, samples=1)["pass@1"]
    accuracy = rollout_metrics(trajs, torch.device("cpu"))["reward/accuracy"]
    assert pass1 == pytest.approx(accuracy) == pytest.approx(2 / 5)


def test_the_report_shows_what_was_measured() -> None:
    """One env: no overall section or row repeating it; an all-n/a metric is named, not a row."""
    one = results_for({"base": records_for("base", BASE)})
    for model in one["models"]:
        model["metrics"]["math"]["tool/valid_call_rate"] = None  # as in a run without tool calls
    text = render_report(one)
    assert "## overall" not in text and "| overall |" not in summary_table(one)
    assert "| tool/valid_call_rate |" not in text
    assert "Not measured here (n/a for every checkpoint): tool/valid_call_rate." in text
    assert "Checkpoint:" in text and "Δ columns" not in text
    two = results_for({"base": records_for("base", BASE), "better": records_for("better", BETTER)})
    assert "Δ columns are each checkpoint minus the first" in render_report(two)


def test_an_episode_shows_its_tool_calls_only_when_it_made_some() -> None:
    recs = records_for("base", BASE)[:2]
    recs[0]["tool_calls"], recs[0]["tool_call_errors"] = 2, 1
    recs[1]["tool_calls"], recs[1]["tool_call_errors"] = 0, None
    text = render_html(recs)
    assert text.count("tool calls (errors)") == 1 and "<td>2 (1)</td>" in text
