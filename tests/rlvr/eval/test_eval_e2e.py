"""End to end: the tiny model (and a perturbed copy) evaluated on a tiny suite, all report files."""

from __future__ import annotations

import json
import math
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import gymnasium
import pytest
import torch

from rlvr.cli import eval_main
from rlvr.errors import ConfigError, UnknownNameError
from rlvr.eval.episodes import read_episodes
from rlvr.eval.evaluator import Evaluator, SuiteEvalConfig, evaluate, load_suite_entries
from rlvr.eval.report import format_delta

PARITY_ID = "evaltest/Parity-v0"

SUITE = """
name: evaltest
entries:
  - env: rlvr/Math-v0
    name: arith
    kwargs: {answer_format: plain, source_kwargs: {n_tasks: 200}}
    split: test
    n_tasks: 2
  - env: evaltest/Parity-v0
    name: parity
    split: null
    n_tasks: 3
"""


def parity_verdict(response: str, task: dict[str, Any]) -> Any:
    """Passes about half the time on a random model: the response length is even."""
    from rlvr.verifiers import Verdict

    passed = len(response) % 2 == 0
    return Verdict(
        float(passed),
        passed,
        "correct" if passed else "wrong_answer",
        {"extracted": response[:1] or None},
    )


def make_parity_env() -> Any:
    from rlvr.envs.verifier_env import VerifierEnv

    tasks = [{"question": f"say something {i}", "task_id": f"p{i}"} for i in range(3)]
    return VerifierEnv(tasks, parity_verdict, max_attempts=2)


@pytest.fixture(scope="module")
def suite_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rlvr import envs  # noqa: F401  (registers the built-in envs)

    if PARITY_ID not in gymnasium.registry:
        gymnasium.register(PARITY_ID, entry_point=make_parity_env)
    path = tmp_path_factory.mktemp("suite") / "evaltest.yaml"
    path.write_text(SUITE)
    return path


@pytest.fixture(scope="module")
def perturbed_path(tiny_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = tmp_path_factory.mktemp("ckpt") / "perturbed"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(0.05 * torch.randn(param.shape, generator=gen))
    model.save_pretrained(target)
    AutoTokenizer.from_pretrained(tiny_model_path).save_pretrained(target)
    return target


# A random tiny model rarely ends its turn, so a space ends it (the stop string is kept).
KW = dict(
    samples=3, temperature=1.0, max_turns=2, max_new_tokens=12, stop=(" ",), seed=7, progress=False
)


@pytest.fixture(scope="module")
def run(
    tiny_model_path: Path, perturbed_path: Path, suite_path: Path, tmp_path_factory: Any
) -> tuple[dict[str, Any], Path]:
    out = tmp_path_factory.mktemp("eval")
    results = evaluate([tiny_model_path, perturbed_path], str(suite_path), out_dir=out, **KW)
    return results, out


def test_writes_every_report_file(run: tuple[dict[str, Any], Path], tiny_model_path: Path) -> None:
    results, out = run
    for name in ["results.json", "report.md", "episodes.jsonl", "episodes.html"]:
        assert (out / name).is_file(), name
    for env in ["arith", "parity", "overall"]:
        assert (out / "plots" / f"{env}.png").read_bytes()[:4] == b"\x89PNG"
    on_disk = json.loads((out / "results.json").read_text())
    assert on_disk["models"] == results["models"]
    assert on_disk["config"]["samples"] == 3 and on_disk["seed"] == 7
    assert {"torch", "transformers", "python"} <= set(on_disk["versions"])
    assert [m["label"] for m in results["models"]] == [tiny_model_path.name, "perturbed"]


def _pass_at_k_brute(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_numbers_recompute_from_episodes(run: tuple[dict[str, Any], Path]) -> None:
    results, out = run
    records = read_episodes(out / "episodes.jsonl")
    assert len(records) == 2 * (2 + 3) * 3
    for model in results["models"]:
        mine = [r for r in records if r["model"] == model["label"]]
        for env in ["arith", "parity"]:
            recs = [r for r in mine if r["env"] == env]
            tasks: dict[str, list[bool]] = {}
            for r in recs:
                tasks.setdefault(r["task_id"], []).append(r["passed"])
                assert sum(r["response_mask"]) == r["model_tokens"] > 0
                assert len(r["response_ids"]) == len(r["response_mask"])
                assert r["reward"] == pytest.approx(sum(r["token_level_scores"]))
                assert r["messages"], "episode messages are recorded"
            metrics = model["metrics"][env]
            for k in (1, 2, 3):
                expected = sum(_pass_at_k_brute(3, sum(p), k) for p in tasks.values()) / len(tasks)
                assert metrics[f"pass@{k}"] == pytest.approx(expected)
            mean_reward = sum(r["reward"] for r in recs) / len(recs)
            assert metrics["mean_reward"] == pytest.approx(mean_reward)
            assert metrics["episodes"] == len(recs)
    # the parity env passes on about half the samples, so the numbers are not all 0 or 1
    parity = [r["passed"] for r in records if r["env"] == "parity"]
    assert 0 < sum(parity) < len(parity)


def test_report_compares_checkpoints(run: tuple[dict[str, Any], Path]) -> None:
    results, out = run
    report = (out / "report.md").read_text()
    base, other = (m["metrics"] for m in results["models"])
    assert base != other  # the perturbed weights sample other tokens
    label = results["models"][1]["label"]
    assert f"Δ {label}" in report
    for env in ["arith", "parity", "overall"]:
        assert f"## {env}" in report
    parity_section = report.split("## parity")[1].split("## overall")[0]
    for name in ["pass@1", "pass@3", "mean_reward", "mean_response_tokens"]:
        row = next(line for line in parity_section.splitlines() if line.startswith(f"| {name} |"))
        delta = format_delta(other["parity"][name], base["parity"][name])
        assert row.endswith(f" {delta} |"), row


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.refs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [str(v) for k, v in attrs if k in ("src", "href")]
        if tag not in ("meta", "br"):
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack.pop() == tag


def test_html_self_contained(run: tuple[dict[str, Any], Path]) -> None:
    _, out = run
    text = (out / "episodes.html").read_text(encoding="utf-8")
    checker = _Checker()
    checker.feed(text)
    assert checker.stack == [] and checker.refs == []
    assert "http://" not in text and "src=" not in text
    assert text.count('class="tok model"') >= 30 and 'class="tok env"' in text


def test_same_seed_same_numbers_via_cli(
    run: tuple[dict[str, Any], Path],
    tiny_model_path: Path,
    suite_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results, _ = run
    args = ["--model", str(tiny_model_path), "--suite", str(suite_path), "--samples", "3"]
    args += ["--temperature", "1.0", "--max-turns", "2", "--max-new-tokens", "12", "--seed", "7"]
    args += ["--stop", " "]
    assert eval_main(args + ["--out", str(tmp_path), "--no-progress"]) == 0
    again = json.loads((tmp_path / "results.json").read_text())
    assert again["models"][0]["metrics"] == results["models"][0]["metrics"]
    printed = capsys.readouterr().out
    assert "| env | pass@1" in printed and "| parity |" in printed and "| overall |" in printed


def test_evaluator_during_training(
    run: tuple[dict[str, Any], Path], tiny_model_path: Path, suite_path: Path
) -> None:
    from rlvr.agents.hf.engine import TransformersEngine

    results, _ = run
    engine = TransformersEngine(str(tiny_model_path))
    try:
        config = SuiteEvalConfig(suite=str(suite_path), samples=3, temperature=1.0, max_turns=2,
                                 max_new_tokens=12, stop=(" ",), seed=7)
        ev = Evaluator(load_suite_entries(config.suite), config.runner_config(), engine=engine,
                       tokenizer=engine.tokenizer, every=2, samples=3, seed=7)
        assert ev.maybe_evaluate(1) is None
        logged = ev.maybe_evaluate(2)
        ev.close()
    finally:
        engine.close()
    assert logged is not None
    base = results["models"][0]["metrics"]
    assert logged["eval/overall/pass@1"] == pytest.approx(base["overall"]["pass@1"])
    assert logged["eval/parity/mean_reward"] == pytest.approx(base["parity"]["mean_reward"])
    assert all(isinstance(v, float) for v in logged.values())


def test_bad_suite_lists_suites(tiny_model_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(UnknownNameError, match=r"unknown suite 'no-such-suite'; known: "):
        evaluate(tiny_model_path, "no-such-suite", progress=False)
    assert eval_main(["--model", str(tiny_model_path), "--suite", "no-such-suite"]) == 2
    assert "unknown suite 'no-such-suite'; known:" in capsys.readouterr().err


def test_bad_model_path(suite_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--model '.*missing': no such file or directory"):
        evaluate(tmp_path / "missing", str(suite_path))
    with pytest.raises(ConfigError, match="not a HuggingFace model directory"):
        evaluate(tmp_path, str(suite_path))


def test_bad_arguments_name_the_field(tiny_model_path: Path, suite_path: Path) -> None:
    with pytest.raises(ConfigError, match="samples must be >= 1; got 0"):
        evaluate(tiny_model_path, str(suite_path), samples=0)
    with pytest.raises(ConfigError, match="engine: unknown value 'tgi'; allowed: sglang, "
                                          "transformers, vllm"):
        evaluate(tiny_model_path, str(suite_path), engine="tgi")


def test_copy_of_checkpoint_gets_unique_labels(tiny_model_path: Path, tmp_path: Path) -> None:
    from rlvr.eval.evaluator import model_labels

    other = tmp_path / tiny_model_path.name
    shutil.copytree(tiny_model_path, other)
    assert model_labels([tiny_model_path, other]) == [
        f"0:{tiny_model_path.name}",
        f"1:{tiny_model_path.name}",
    ]


def test_records_and_html_show_the_gold_answer(run: tuple[dict[str, Any], Path]) -> None:
    _, out = run
    records = read_episodes(out / "episodes.jsonl")
    arith = [r for r in records if r["env"] == "arith" and r["verdict_reason"] is not None]
    assert arith and all(isinstance(r["gold"], str) and r["gold"] for r in arith)  # env stepped
    assert all(r["gold"] is None for r in records if r["env"] == "parity")  # no reference
    html = (out / "episodes.html").read_text()
    assert "gold answer" in html and arith[0]["gold"] in html
