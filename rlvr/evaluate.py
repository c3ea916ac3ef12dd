"""Evaluate checkpoints on an env suite: pass@k tables, plots and browsable episodes.

Three entry points share one implementation:

- ``evaluate(models, suite, ...)``: from Python; returns the results dict (and writes the report
  files when ``out_dir`` is given);
- ``cli_main(argv)``: ``rlvr eval --model PATH [--model PATH ...] --suite NAME ...``;
- ``Evaluator``: periodic held-out evaluation during training (``maybe_evaluate(step)``) on the
  trainer's own engine, returning flat ``eval/...`` metrics to log next to the training ones.

Every suite entry contributes ``n`` tasks (``task_index`` 0..n-1 of the env's split); each task is
played ``samples`` times. Each episode's sampling seed is derived from ``(seed, entry, task,
sample)`` only, so the same seed gives the same episodes and the same results.json numbers
whatever the batching, and every checkpoint is evaluated on exactly the same tasks.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agents.engines import engine_names
from rlvr.errors import ConfigError, RlvrError, unknown_name
from rlvr.eval.episodes import write_episodes
from rlvr.eval.html import write_html
from rlvr.eval.metrics import aggregate
from rlvr.eval.plan import PlannedEpisode, SuiteEntry, plan_episodes
from rlvr.eval.plots import write_plots
from rlvr.eval.report import summary_table, write_report
from rlvr.eval.rollout import make_runner, play

__all__ = ["ENGINES", "Evaluator", "SuiteEvalConfig", "cli_main", "evaluate", "load_suite_entries"]

#: Rollout engines ``evaluate`` can build from a checkpoint path (``agents.engines``).
ENGINES = engine_names()


@dataclass(kw_only=True)
class SuiteEvalConfig:
    """How to evaluate (every field is recorded in results.json).

    Attributes:
        suite: a suite name from ``configs/suites`` or a path to a suite YAML file.
        samples: episodes per task (the ``k`` of pass@k, mean@k and maj@k), >= 1.
        temperature: sampling temperature >= 0; None means 0 (greedy) when ``samples == 1``
            and 1.0 otherwise (pass@k with greedy samples would equal pass@1).
        top_p: nucleus sampling mass in (0, 1].
        max_turns: model turns per episode, >= 1; None keeps the runner's default.
        max_new_tokens: tokens per model turn, >= 1.
        max_response_tokens: model + env tokens per episode, >= 1; None keeps the runner's
            default.
        stop: extra strings that end a model turn (the chat template's end of turn always does).
        seed: the root of every episode's seed (``rlvr.eval.plan``).
        engine: one of ``ENGINES``.
        concurrency: episodes in flight at once, >= 1.
    """

    suite: str
    samples: int = 1
    temperature: float | None = None
    top_p: float = 1.0
    max_turns: int | None = None
    max_new_tokens: int = 256
    max_response_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int = 0
    engine: str = "transformers"
    concurrency: int = 64

    def __post_init__(self) -> None:
        """Validate every field (raises ``ConfigError`` naming it); resolve ``temperature``."""
        for name in (
            "samples",
            "max_new_tokens",
            "concurrency",
            "max_turns",
            "max_response_tokens",
        ):
            value = getattr(self, name)
            if value is None and name in ("max_turns", "max_response_tokens"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1; got {value!r}")
        if self.temperature is None:
            self.temperature = 0.0 if self.samples == 1 else 1.0
        if not self.temperature >= 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy); got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1]; got {self.top_p!r}")
        self.stop = tuple(self.stop)
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ConfigError(f"stop must hold non-empty strings; got {self.stop!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be an int >= 0; got {self.seed!r}")
        if self.engine not in ENGINES:
            raise ConfigError(f"engine must be one of {', '.join(ENGINES)}; got {self.engine!r}")

    @classmethod
    def build(cls, **fields: Any) -> SuiteEvalConfig:
        """``SuiteEvalConfig(**fields)``, with an unknown field reported as a ``ConfigError``."""
        known = [f.name for f in dataclasses.fields(cls)]
        for name in fields:
            if name not in known:
                raise unknown_name("evaluation option", name, known)
        return cls(**fields)


# ----------------------------------------------------------------------------------- suites
def load_suite_entries(suite: str) -> list[SuiteEntry]:
    """The entries of a suite given by name (``configs/suites/NAME.yaml``) or YAML path.

    Each entry's env is built once to cap ``n_tasks`` at the number of tasks it has.

    Raises:
        UnknownNameError: no such suite; the message lists the known suites.
        envs.errors.SuiteError: a malformed suite file (the message names the entry and key).
    """
    import envs

    path = Path(suite)
    is_file = path.suffix in (".yaml", ".yml") or path.is_file()
    known = envs.list_suites()
    if not is_file and suite not in known:
        raise unknown_name("suite", suite, known)
    entries: list[SuiteEntry] = []
    seen: dict[str, int] = {}
    for raw in envs.load_suite(suite).entries:
        key = raw.name or raw.env_id
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            key = f"{key}#{seen[key]}"
        kwargs = dict(raw.kwargs)
        if raw.split is not None:
            kwargs["split"] = raw.split
        env = raw.make()
        try:
            n = len(raw.task_indices(env))
        finally:
            env.close()
        entries.append(SuiteEntry(key=key, env_id=raw.env_id, kwargs=kwargs, n=n))
    return entries


# ----------------------------------------------------------------------------------- running
def _build_engine(
    path: Path, tokenizer: Any, config: SuiteEvalConfig, engine_kwargs: Mapping[str, Any]
) -> Any:
    """A rollout engine serving the checkpoint at ``path``, options ``engine_kwargs``."""
    from agents.engines import EngineRequest, build_engine

    return build_engine(EngineRequest(engine=config.engine, model_path=path, tokenizer=tokenizer,
                                      max_batch_size=32, serve_model=True,
                                      options=dict(engine_kwargs))).engine


def check_model_path(path: str | Path) -> Path:
    """Resolve a checkpoint directory, or raise ``ConfigError`` saying what is wrong with it."""
    target = Path(path).expanduser()
    if not target.exists():
        raise ConfigError(f"--model {str(path)!r}: no such file or directory")
    if not target.is_dir() or not (target / "config.json").is_file():
        raise ConfigError(
            f"--model {str(path)!r}: not a HuggingFace model directory (expected a config.json "
            "and weights saved with save_pretrained)"
        )
    return target.resolve()


def model_labels(paths: Sequence[Path]) -> list[str]:
    """Short unique labels for checkpoints: the directory name, prefixed by its index if taken."""
    names = [p.name or str(p) for p in paths]
    return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]


def _runner(engine: Any, tokenizer: Any, config: SuiteEvalConfig) -> Any:
    return make_runner(
        engine,
        tokenizer,
        temperature=float(config.temperature or 0.0),
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        max_turns=config.max_turns,
        max_response_tokens=config.max_response_tokens,
        stop=config.stop,
    )


def _play(
    engine: Any,
    tokenizer: Any,
    planned: Sequence[PlannedEpisode],
    config: SuiteEvalConfig,
    **kw: Any,
) -> list[dict[str, Any]]:
    """Play ``planned`` on ``engine`` with a fresh runner (closed afterwards)."""
    runner = _runner(engine, tokenizer, config)
    try:
        return play(runner, tokenizer, planned, concurrency=config.concurrency, **kw)
    finally:
        runner.close()


def _evaluate_model(
    path: Path,
    label: str,
    planned: Sequence[PlannedEpisode],
    config: SuiteEvalConfig,
    engine_kwargs: Mapping[str, Any],
    progress: bool,
) -> list[dict[str, Any]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    engine = _build_engine(path, tokenizer, config, engine_kwargs)
    try:
        return _play(engine, tokenizer, planned, config, label=label, progress=progress)
    finally:
        engine.close()


# ----------------------------------------------------------------------------------- outputs
def versions() -> dict[str, str]:
    """Versions of Python and of the packages that shape the numbers ("not installed" if absent)."""
    out = {"python": platform.python_version()}
    for name in ("rlvr", "torch", "transformers", "gymnasium", "sglang"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def _results_header(config: SuiteEvalConfig, entries: Sequence[SuiteEntry]) -> dict[str, Any]:
    """The parts of results.json that describe the run (config, seed, versions, suite)."""
    return {
        "config": asdict(config),
        "seed": config.seed,
        "versions": versions(),
        "suite": {"name": config.suite, "entries": [asdict(e) for e in entries]},
        "envs": [e.key for e in entries],
    }


def write_outputs(
    results: dict[str, Any], records: Sequence[Mapping[str, Any]], out_dir: Path
) -> None:
    """Write results.json, report.md, plots/*.png, episodes.jsonl and episodes.html.

    Adds ``results["plots"]`` (env key -> PNG path relative to ``out_dir``) before writing.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    results["plots"] = write_plots(results, out_dir)
    write_episodes(records, out_dir / "episodes.jsonl")
    write_html(records, out_dir / "episodes.html", title=f"rlvr eval: {results['config']['suite']}")
    write_report(results, out_dir / "report.md")
    (out_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")


def evaluate(
    models: str | Path | Sequence[str | Path],
    suite: str | Path,
    *,
    samples: int = 1,
    temperature: float | None = None,
    max_turns: int | None = None,
    out_dir: str | Path | None = None,
    seed: int = 0,
    engine: str = "transformers",
    engine_kwargs: Mapping[str, Any] | None = None,
    imports: Sequence[str] = (),
    progress: bool = True,
    **options: Any,
) -> dict[str, Any]:
    """Evaluate one or more checkpoints on a suite.

    Args:
        models: HF checkpoint directories (one path or several); the first is the baseline of
            every delta in the report.
        suite: a suite name (``configs/suites/NAME.yaml``) or a suite YAML path.
        samples: episodes per task (k of pass@k).
        temperature: sampling temperature; None = greedy for one sample, else 1.0.
        max_turns: model turns per episode (None = the runner's default).
        out_dir: where to write results.json, report.md, plots/, episodes.jsonl and
            episodes.html; None writes nothing.
        seed: root seed of every episode (same seed, same results).
        engine: a name in ``ENGINES``: "transformers" (in-process, CPU or one GPU) or
            "sglang" (launches a server on each checkpoint; its interpreter is
            ``$RLVR_SGLANG_PYTHON`` when sglang lives in its own venv).
        engine_kwargs: the engine's options (``TransformersEngine`` arguments such as
            ``device``; ``agents.sglang.SGLangOptions`` fields for sglang).
        imports: modules to import first (third-party packages that register envs).
        progress: show a progress bar.
        **options: other ``SuiteEvalConfig`` fields: ``top_p``, ``max_new_tokens``,
            ``max_response_tokens``, ``stop``, ``concurrency``.

    Returns:
        The results dict: ``config`` (the ``SuiteEvalConfig``), ``seed``, ``versions``, ``suite``
        (name and entries), ``envs`` (entry keys), ``models`` (``label``, ``path``,
        ``metrics``: one ``rlvr.eval.metrics.summarize`` dict per env and ``"overall"``),
        ``timing`` (seconds per checkpoint), and ``plots`` when files were written.

    Raises:
        ConfigError: a bad argument or model path (the message names it).
        UnknownNameError: an unknown suite (the message lists the suites) or option.
    """
    config = SuiteEvalConfig.build(
        suite=str(suite),
        samples=samples,
        temperature=temperature,
        max_turns=max_turns,
        seed=seed,
        engine=engine,
        **options,
    )
    paths = [models] if isinstance(models, str | Path) else list(models)
    if not paths:
        raise ConfigError("models is empty; give at least one checkpoint directory")
    resolved = [check_model_path(p) for p in paths]
    if imports:
        from envs.registration import import_plugins

        import_plugins(imports)
    entries = load_suite_entries(config.suite)
    planned = plan_episodes(entries, config.samples, config.seed)
    results: dict[str, Any] = {**_results_header(config, entries), "models": [], "timing": {}}
    all_records: list[dict[str, Any]] = []
    for path, label in zip(resolved, model_labels(resolved), strict=True):
        start = time.perf_counter()
        records = _evaluate_model(path, label, planned, config, engine_kwargs or {}, progress)
        results["timing"][label] = round(time.perf_counter() - start, 3)
        metrics = aggregate(records, config.samples, results["envs"])
        results["models"].append({"label": label, "path": str(path), "metrics": metrics})
        all_records.extend(records)
    if out_dir is not None:
        write_outputs(results, all_records, Path(out_dir))
    return results


# ----------------------------------------------------------------------------------- CLI
def build_parser() -> argparse.ArgumentParser:
    """The ``rlvr eval`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="rlvr eval",
        description="Evaluate checkpoints on an env suite: pass@k table, report.md, plots, "
        "episodes.jsonl and episodes.html.",
    )
    add = parser.add_argument
    add(
        "--model",
        action="append",
        required=True,
        metavar="PATH",
        help="HF checkpoint directory; repeat to compare (deltas are vs the first)",
    )
    add("--suite", required=True, help="suite name (configs/suites/NAME.yaml) or a YAML path")
    add("--samples", type=int, default=1, help="episodes per task: the k of pass@k (default 1)")
    add(
        "--temperature",
        type=float,
        default=None,
        help="sampling temperature (default: 0 for --samples 1, else 1.0)",
    )
    add("--top-p", type=float, default=1.0, help="nucleus sampling mass (default 1.0)")
    add(
        "--max-turns",
        type=int,
        default=None,
        help="model turns per episode (default: the runner's)",
    )
    add("--max-new-tokens", type=int, default=256, help="tokens per model turn (default 256)")
    add("--max-response-tokens", type=int, default=None, help="model + env tokens per episode")
    add(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="extra string that ends a model turn; repeatable",
    )
    add("--out", default=None, metavar="DIR", help="output directory (default outputs/eval/SUITE)")
    add("--seed", type=int, default=0, help="root seed of every episode (default 0)")
    add("--engine", choices=ENGINES, default="transformers", help="rollout engine")
    add("--device", default=None, help="device for the transformers engine (default cpu)")
    add("--sglang-url", default=None, metavar="URL",
        help="with --engine sglang: attach to this server (it loads each --model from disk) "
             "instead of launching one per model")
    add("--sglang-allow-unseeded", action="store_true",
        help="with --engine sglang: accept a server that ignores sampling seeds (CPU sglang); "
             "sampled episodes are then not reproducible")
    add(
        "--import",
        dest="imports",
        action="append",
        default=[],
        metavar="MODULE",
        help="import a module first (it registers its envs); repeatable",
    )
    add("--concurrency", type=int, default=64, help="episodes in flight (default 64)")
    add("--no-progress", action="store_true", help="hide the progress bar")
    return parser


def cli_main(argv: Sequence[str] | None = None) -> int:
    """``rlvr eval ...``: run ``evaluate``, write the report files, print the summary table.

    Args:
        argv: the arguments after ``eval`` (default: ``sys.argv[2:]``).

    Returns:
        The exit status: 0 on success, 2 on a bad argument, suite, model path or env (the
        message goes to stderr).
    """
    from agents.errors import AgentError
    from envs.errors import EnvError

    args = build_parser().parse_args(list(sys.argv[2:] if argv is None else argv))
    out = Path(args.out) if args.out else Path("outputs") / "eval" / Path(args.suite).stem
    engine_kwargs: dict[str, Any] = {}
    if args.device and args.engine == "transformers":
        engine_kwargs["device"] = args.device
    if args.engine == "sglang":
        if args.sglang_url:
            engine_kwargs["url"] = args.sglang_url
        if args.sglang_allow_unseeded:
            engine_kwargs["allow_unseeded"] = True
    try:
        results = evaluate(
            args.model,
            args.suite,
            samples=args.samples,
            temperature=args.temperature,
            max_turns=args.max_turns,
            out_dir=out,
            seed=args.seed,
            engine=args.engine,
            engine_kwargs=engine_kwargs,
            imports=args.imports,
            progress=not args.no_progress,
            top_p=args.top_p,
            max_new_tokens=args.max_new_tokens,
            max_response_tokens=args.max_response_tokens,
            stop=tuple(args.stop),
            concurrency=args.concurrency,
        )
    except (RlvrError, EnvError, AgentError) as err:
        print(f"rlvr eval: error: {err}", file=sys.stderr)
        return 2
    print(summary_table(results))
    print(f"\nwrote {out}/: results.json, report.md, plots/, episodes.jsonl, episodes.html")
    return 0


# ----------------------------------------------------------------------------------- training
def flatten_metrics(
    metrics: Mapping[str, Mapping[str, Any]], prefix: str = "eval"
) -> dict[str, float]:
    """``{env: {name: value}}`` -> ``{"prefix/env/name": float}``, numeric scalars only."""
    flat: dict[str, float] = {}
    for env, values in metrics.items():
        for name, value in values.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                flat[f"{prefix}/{env}/{name}"] = float(value)
    return flat


class Evaluator:
    """Held-out evaluation during training, on the trainer's own engine (weights shared).

    Every evaluation plays the same planned episodes (same tasks, same seeds), so the numbers
    of different steps compare fairly.

    Args:
        suite: a suite name or YAML path (the held-out tasks).
        engine: the rollout engine holding the current policy (an ``agents`` engine).
        tokenizer: the policy's tokenizer.
        every: evaluate when ``step % every == 0`` (0 disables periodic evaluation).
        samples: episodes per task (k of pass@k).
        temperature: sampling temperature (None = greedy for one sample, else 1.0).
        max_turns: model turns per episode (None = the runner's default).
        seed: root seed of the episodes.
        out_dir: if set, each evaluation writes ``out_dir/step_{step:06d}/`` (results.json,
            report.md, plots/, episodes.jsonl, episodes.html).
        prefix: the first component of the returned metric names.
        progress: show a progress bar.
        **options: other ``SuiteEvalConfig`` fields (``max_new_tokens``, ``max_response_tokens``,
            ``top_p``, ``stop``, ``concurrency``).

    Raises:
        ConfigError: a bad argument (the message names it).
        UnknownNameError: an unknown suite (the message lists the suites).
    """

    def __init__(
        self,
        suite: str | Path,
        *,
        engine: Any,
        tokenizer: Any,
        every: int,
        samples: int = 1,
        temperature: float | None = None,
        max_turns: int | None = None,
        seed: int = 0,
        out_dir: str | Path | None = None,
        prefix: str = "eval",
        progress: bool = False,
        **options: Any,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(f"every must be an int >= 0 (0 = never); got {every!r}")
        self.config = SuiteEvalConfig.build(
            suite=str(suite),
            samples=samples,
            temperature=temperature,
            max_turns=max_turns,
            seed=seed,
            **options,
        )
        self.every = every
        self.engine = engine
        self.tokenizer = tokenizer
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.prefix = prefix
        self.progress = progress
        self.entries = load_suite_entries(self.config.suite)
        self.planned = plan_episodes(self.entries, self.config.samples, self.config.seed)
        self.last_results: dict[str, Any] | None = None
        self.last_records: list[dict[str, Any]] = []

    def maybe_evaluate(self, step: int) -> dict[str, float] | None:
        """Evaluate if ``step`` is due (``every > 0`` and ``step % every == 0``), else None.

        Returns:
            None when the step is not due; else ``{"<prefix>/<env>/<metric>": float}`` for
            every env of the suite and ``"overall"``, with the numeric metrics of
            ``rlvr.eval.metrics.summarize``: e.g. ``eval/overall/pass@1``,
            ``eval/overall/mean_reward``, ``eval/arith/maj@4``, ``eval/arith/mean_turns``
            (metrics that are n/a, such as maj@k without answers, are left out).
        """
        if self.every == 0 or step % self.every != 0:
            return None
        return self.evaluate(step)

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate now (see ``maybe_evaluate`` for the returned metrics)."""
        label = f"step_{step:06d}"
        records = _play(
            self.engine,
            self.tokenizer,
            self.planned,
            self.config,
            label=label,
            progress=self.progress,
        )
        self.last_records = records
        metrics = aggregate(records, self.config.samples, [e.key for e in self.entries])
        self.last_results = {
            **_results_header(self.config, self.entries),
            "step": step,
            "models": [{"label": label, "path": "(training policy)", "metrics": metrics}],
        }
        if self.out_dir is not None:
            write_outputs(self.last_results, records, self.out_dir / label)
        return flatten_metrics(metrics, self.prefix)
