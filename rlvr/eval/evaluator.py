"""Evaluate checkpoints on an env suite: pass@k tables, plots and browsable episodes.

One stack, two callers:

- ``evaluate(models, suite, ...)``: from Python (and ``rlvr eval``, whose arguments
  ``rlvr.cli`` parses); one ``Evaluator`` per checkpoint; returns the results dict (and writes
  the report files when ``out_dir`` is given);
- ``Evaluator``: suite entries, a runner config and an engine; it keeps one episode runner (and
  so one chat renderer) for its lifetime. During training it evaluates the trainer's own engine
  (``maybe_evaluate(step)``), returning flat ``eval/...`` metrics to log next to the training
  ones (``rlvr.training.heldout`` builds the trainer's).

Every suite entry contributes ``n`` tasks (``task_index`` 0..n-1 of the env's split); each task is
played ``samples`` times. Each episode's sampling seed is derived from ``(seed, entry, task,
sample)`` only, so the same seed gives the same episodes and the same results.json numbers
whatever the batching, and every checkpoint is evaluated on exactly the same tasks.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import platform
import tempfile
import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlvr.agents.engine import SamplingParams
from rlvr.agents.engine_registry import engine_names
from rlvr.agents.runner import EpisodeRunner, RunnerConfig
from rlvr.config.engine import EngineSection
from rlvr.config.loader import from_dict, merge, parse_overrides
from rlvr.config_checks import bounded
from rlvr.errors import ConfigError, unknown_name
from rlvr.eval.episodes import write_episodes
from rlvr.eval.html import write_html
from rlvr.eval.metrics import aggregate
from rlvr.eval.plan import SuiteEntry, default_temperature, plan_episodes
from rlvr.eval.plots import write_plots
from rlvr.eval.report import write_report
from rlvr.eval.rollout import play
from rlvr.learner.lora import is_adapter_dir

__all__ = [
    "ENGINES",
    "Evaluator",
    "SuiteEvalConfig",
    "eval_config",
    "evaluate",
    "load_suite_entries",
    "suite_entries",
    "write_suite",
]

#: Rollout engines ``evaluate`` can build from a checkpoint path (``rlvr.agents.engine_registry``).
ENGINES = engine_names()


@dataclass(kw_only=True)
class SuiteEvalConfig(EngineSection):
    """How to evaluate (every field is recorded in results.json).

    Built like ``rlvr train``'s config: ``eval_config`` (and so ``rlvr eval``, whose flags are
    these keys and which takes dotted ``key=value`` overrides after them) runs the loader of
    ``rlvr.config.loader``, and the fields are checked by ``rlvr.config_checks``, so a message
    names the key as typed (``sglang.weight_sync: unknown value ...``). ``engine``,
    ``transformers`` and ``sglang`` are ``rlvr.config.engine.EngineSection``'s, the keys of
    ``rollout.*`` in training.

    Attributes:
        suite: a suite name from ``configs/suites`` or a path to a suite YAML file.
        samples: episodes per task (the ``k`` of pass@k, mean@k and maj@k).
        temperature: sampling temperature (0 = greedy); null: ``rlvr.eval.plan.default_temperature``
            (greedy for one sample, else 1.0: pass@k with greedy samples would equal pass@1).
        top_p: nucleus sampling mass.
        max_turns: model turns per episode; null keeps the runner's default.
        max_new_tokens: tokens per model turn.
        max_response_tokens: model + env tokens per episode; null keeps the runner's default.
        stop: extra strings that end a model turn (the chat template's end of turn always does).
        seed: the root of every episode's seed (``rlvr.eval.plan``).
        device: where an in-process engine (transformers) loads the checkpoint (null: cpu);
            server engines ignore it.
        concurrency: episodes in flight at once.
        env_step_timeout_s: wall-clock limit of one env call (reset, a step): an episode whose
            call runs past it ends with reason "timeout" and the call's work is stopped.
    """

    suite: str
    samples: int = bounded(1, ge=1)
    temperature: float | None = bounded(None, ge=0)
    top_p: float = bounded(1.0, gt=0, le=1)
    max_turns: int | None = bounded(None, ge=1)
    max_new_tokens: int = bounded(256, ge=1)
    max_response_tokens: int | None = bounded(None, ge=1)
    stop: tuple[str, ...] = ()
    seed: int = bounded(0, ge=0)
    device: str | None = None
    concurrency: int = bounded(64, ge=1)
    env_step_timeout_s: float = bounded(60.0, gt=0)

    def __post_init__(self) -> None:
        """Validate every field (``ConfigError`` naming it); resolve the null ones."""
        super().__post_init__()
        # None limits are the runner's defaults, recorded as the numbers that run.
        if self.max_turns is None:
            self.max_turns = RunnerConfig.max_turns
        if self.max_response_tokens is None:
            self.max_response_tokens = RunnerConfig.max_response_tokens
        if self.temperature is None:
            self.temperature = default_temperature(self.samples)
        self.stop = tuple(self.stop)
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ConfigError(f"stop must hold non-empty strings; got {self.stop!r}", key="stop")

    def runner_config(self) -> RunnerConfig:
        """The episode runner's sampling and limits (``None`` limits keep the runner's)."""
        config = RunnerConfig(
            sampling=SamplingParams(temperature=float(self.temperature or 0.0), top_p=self.top_p,
                                    stop=self.stop),
            max_tokens_per_turn=self.max_new_tokens,
            env_step_timeout_s=float(self.env_step_timeout_s),
        )
        limits: dict[str, Any] = {"max_turns": self.max_turns,
                                  "max_response_tokens": self.max_response_tokens}
        return dataclasses.replace(config, **{k: v for k, v in limits.items() if v is not None})


# ----------------------------------------------------------------------------------- suites
def load_suite_entries(suite: str) -> list[SuiteEntry]:
    """The entries of a suite given by name (``configs/suites/NAME.yaml``) or YAML path.

    Raises:
        UnknownNameError: no such suite; the message lists the known suites.
        rlvr.envs.errors.SuiteError: a malformed suite file (the message names the entry and key).
    """
    from rlvr import envs

    path = Path(suite)
    is_file = path.suffix in (".yaml", ".yml") or path.is_file()
    known = envs.list_suites()
    if not is_file and suite not in known:
        raise unknown_name("suite", suite, known)
    return suite_entries(envs.load_suite(suite).entries)


def suite_entries(raw_entries: Sequence[Any]) -> list[SuiteEntry]:
    """Evaluation entries of ``rlvr.envs.suites.SuiteEntry`` items (keys made unique, ``n`` capped).

    Each entry's env is built once to cap ``n_tasks`` at the number of tasks it has.
    """
    entries: list[SuiteEntry] = []
    seen: dict[str, int] = {}
    for raw in raw_entries:
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


def write_suite(entries: Sequence[SuiteEntry], path: Path, name: str = "heldout") -> Path:
    """Write ``entries`` as a suite YAML file (what ``load_suite_entries`` reads), for users.

    The trainer writes its in-memory held-out suite this way, so that ``rlvr eval --suite
    PATH`` scores checkpoints on the same tasks; nothing reads it back during training.
    """
    import yaml

    rows = []
    for e in entries:
        kwargs = dict(e.kwargs)
        rows.append({"env": e.env_id, "name": e.key, "split": kwargs.pop("split", None),
                     "n_tasks": e.n, "kwargs": kwargs})
    path.write_text(yaml.safe_dump({"name": name, "entries": rows}, sort_keys=False))
    return path


# ----------------------------------------------------------------------------------- running
def _build_engine(path: Path, tokenizer: Any, config: SuiteEvalConfig) -> Any:
    """A rollout engine serving the checkpoint at ``path`` (``config.engine`` and its options)."""
    from rlvr.agents.engine_registry import EngineRequest, build_engine

    return build_engine(EngineRequest(engine=config.engine, model_path=path, tokenizer=tokenizer,
                                      max_batch_size=32, serve_model=True, device=config.device,
                                      options=config.engine_options)).engine


def eval_config(fields: Mapping[str, Any], overrides: Sequence[str] = ()) -> SuiteEvalConfig:
    """A ``SuiteEvalConfig`` from field values and dotted ``key=value`` overrides.

    The loader of ``rlvr train`` (``rlvr.config.loader.from_dict``): sections may be given as
    mappings (``{"sglang": {"url": URL}}``) or their dataclasses, ``overrides`` apply on top
    (``["transformers.threads=2"]``).

    Raises:
        ConfigError: an unknown key (the keys allowed there) or a bad value, named as dotted.
    """
    return typing.cast(SuiteEvalConfig,
                       from_dict(SuiteEvalConfig, merge(dict(fields), parse_overrides(overrides))))


def check_model_path(path: str | Path) -> Path:
    """Resolve a checkpoint directory, or raise ``ConfigError`` saying what is wrong with it.

    A ``.gguf`` file is imported once into a cached HF folder (``rlvr.gguf_import``), which is
    returned.
    """
    from rlvr.gguf_import import is_gguf, resolve_model_path

    target = Path(path).expanduser()
    if not target.exists():
        raise ConfigError(f"--model {str(path)!r}: no such file or directory")
    if is_gguf(target):
        return resolve_model_path(target, key="--model").resolve()
    if is_adapter_dir(target):
        return target.resolve()
    if not target.is_dir() or not (target / "config.json").is_file():
        raise ConfigError(
            f"--model {str(path)!r}: not a HuggingFace model directory (expected a config.json "
            "and weights saved with save_pretrained) nor a LoRA adapter directory (an "
            "adapter_config.json, as peft and rlvr's LoRA export write)"
        )
    return target.resolve()


def _merge_adapter(adapter_dir: Path, out_dir: Path) -> Path:
    """Write the adapter's base model with the adapter merged in to ``out_dir`` (a HF dir)."""
    from transformers import AutoTokenizer

    from rlvr.learner.lora import load_merged

    merged = load_merged(adapter_dir)
    merged.save_pretrained(out_dir, safe_serialization=True)
    has_tokenizer = any((adapter_dir / name).is_file()
                        for name in ("tokenizer.json", "tokenizer_config.json"))
    base = json.loads((adapter_dir / "adapter_config.json").read_text())
    source = adapter_dir if has_tokenizer else Path(base["base_model_name_or_path"])
    AutoTokenizer.from_pretrained(str(source)).save_pretrained(out_dir)
    return out_dir


def model_labels(paths: Sequence[Path]) -> list[str]:
    """Short unique labels for checkpoints: the directory name, prefixed by its index if taken."""
    names = [p.name or str(p) for p in paths]
    return [n if names.count(n) == 1 else f"{i}:{n}" for i, n in enumerate(names)]


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


def _results_header(config: Mapping[str, Any], entries: Sequence[SuiteEntry]) -> dict[str, Any]:
    """The parts of results.json that describe the run (config, seed, versions, suite)."""
    return {
        "config": dict(config),
        "seed": config["seed"],
        "versions": versions(),
        "suite": {"name": config["suite"], "entries": [asdict(e) for e in entries]},
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
    suite: str | Path | None = None,
    *,
    config: SuiteEvalConfig | None = None,
    out_dir: str | Path | None = None,
    imports: Sequence[str] = (),
    progress: bool = True,
    loggers: Sequence[str] = (),
    **fields: Any,
) -> dict[str, Any]:
    """Evaluate one or more checkpoints on a suite.

    Args:
        models: HF checkpoint directories (one path or several); the first is the baseline of
            every delta in the report.
        suite: a suite name (``configs/suites/NAME.yaml``) or a suite YAML path (the ``suite``
            field; not needed with ``config``).
        config: the whole ``SuiteEvalConfig`` (e.g. from ``eval_config``, as ``rlvr eval``
            builds it); else it is built from ``suite`` and ``fields`` by ``eval_config``.
        out_dir: where to write results.json, report.md, plots/, episodes.jsonl and
            episodes.html; None writes nothing.
        imports: modules to import first (third-party packages that register envs).
        progress: show a progress bar.
        loggers: trackers to log the pass@k table and the report files to (``mlflow``,
            ``wandb``, a plugin's: ``rlvr.eval.tracking``); needs ``out_dir``.
        **fields: other ``SuiteEvalConfig`` fields: ``samples`` (k of pass@k), ``temperature``
            (None: greedy for one sample, else 1.0), ``max_turns``, ``seed``, ``top_p``,
            ``max_new_tokens``, ``max_response_tokens``, ``stop``, ``concurrency``,
            ``env_step_timeout_s``, ``device``, ``engine`` ("transformers" in-process, or
            "sglang": a server launched on each checkpoint, or ``sglang={"url": URL}`` to
            attach to one) and the engines' options (``transformers={"threads": 1}``).

    Returns:
        The results dict: ``config`` (the ``SuiteEvalConfig``), ``seed``, ``versions``, ``suite``
        (name and entries), ``envs`` (entry keys), ``models`` (``label``, ``path``,
        ``metrics``: one ``rlvr.eval.metrics.summarize`` dict per env and ``"overall"``),
        ``timing`` (seconds per checkpoint), and ``plots`` when files were written.

    Raises:
        ConfigError: a bad argument or model path (the message names it).
        UnknownNameError: an unknown suite (the message lists the suites).
    """
    if config is None:
        if suite is None:
            raise ConfigError("evaluate needs a suite (or a config)", key="suite")
        config = eval_config({"suite": str(suite), **fields})
    elif suite is not None or fields:
        raise ConfigError("evaluate takes either config or suite and fields, not both")
    paths = [models] if isinstance(models, str | Path) else list(models)
    if not paths:
        raise ConfigError("models is empty; give at least one checkpoint directory")
    resolved = [check_model_path(p) for p in paths]
    if imports:
        from rlvr.envs.registration import import_plugins

        import_plugins(imports)
    if loggers:
        from rlvr.tracking import check_loggers

        if out_dir is None:
            raise ConfigError("loggers needs out_dir: the tracked run is named after it and "
                              "keeps its files", key="loggers")
        check_loggers(loggers, key="loggers")  # before any episode is played
    entries = load_suite_entries(config.suite)
    results: dict[str, Any] = {
        **_results_header(asdict(config), entries), "models": [], "timing": {}
    }
    all_records: list[dict[str, Any]] = []
    for path, label in zip(resolved, model_labels(resolved), strict=True):
        start = time.perf_counter()
        records = _evaluate_model(path, label, entries, config, progress)
        results["timing"][label] = round(time.perf_counter() - start, 3)
        metrics = aggregate(records, config.samples, results["envs"])
        results["models"].append({"label": label, "path": str(path), "metrics": metrics})
        all_records.extend(records)
    if out_dir is not None:
        write_outputs(results, all_records, Path(out_dir))
    if loggers and out_dir is not None:
        from rlvr.eval.tracking import log_results

        results["failed_loggers"] = log_results(results, Path(out_dir), loggers)
    return results


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


def _evaluate_model(
    path: Path,
    label: str,
    entries: Sequence[SuiteEntry],
    config: SuiteEvalConfig,
    progress: bool,
) -> list[dict[str, Any]]:
    """The episodes.jsonl records of the checkpoint at ``path`` (its own engine and runner).

    A LoRA adapter directory is evaluated as its base model with the adapter merged in, written
    to a temporary directory for the engine to load.
    """
    if is_adapter_dir(path):
        with tempfile.TemporaryDirectory(prefix="rlvr-merged-") as merged:
            return _evaluate_model(_merge_adapter(path, Path(merged)), label, entries, config,
                                   progress)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(path))
    engine = _build_engine(path, tokenizer, config)
    try:
        evaluator = Evaluator(entries, config.runner_config(), engine=engine, tokenizer=tokenizer,
                              samples=config.samples, seed=config.seed,
                              concurrency=config.concurrency, progress=progress,
                              record=asdict(config))
        try:
            return evaluator.play(label)
        finally:
            evaluator.close()
    finally:
        engine.close()


class Evaluator:
    """Plays a suite's planned episodes on one engine, with one runner for its lifetime.

    Every evaluation plays the same planned episodes (same tasks, same seeds), so the numbers
    of different steps compare fairly. Call ``close()`` at the end (it stops the runner's env
    threads; the engine belongs to the caller).

    Args:
        entries: the suite entries (``load_suite_entries``, or built in memory).
        runner: the episode runner's sampling and limits (``SuiteEvalConfig.runner_config``).
        engine: the rollout engine holding the policy (an ``agents`` engine).
        tokenizer: the policy's tokenizer.
        samples: episodes per task (k of pass@k), >= 1.
        seed: root seed of the episodes.
        every: ``maybe_evaluate`` evaluates when ``step % every == 0`` (0: never).
        concurrency: episodes in flight at once, >= 1.
        out_dir: if set, each ``evaluate`` writes ``out_dir/step_{step:06d}/`` (results.json,
            report.md, plots/, episodes.jsonl, episodes.html).
        prefix: the first component of the returned metric names.
        progress: show a progress bar.
        record: the ``config`` written into results.json (default: the suite name "heldout",
            samples, seed, the runner's temperature and turns, the engine's type).

    Raises:
        ConfigError: a bad argument (the message names it).
    """

    def __init__(
        self,
        entries: Sequence[SuiteEntry],
        runner: RunnerConfig,
        *,
        engine: Any,
        tokenizer: Any,
        samples: int = 1,
        seed: int = 0,
        every: int = 0,
        concurrency: int = 64,
        out_dir: str | Path | None = None,
        prefix: str = "eval",
        progress: bool = False,
        record: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 0:
            raise ConfigError(f"every must be an int >= 0 (0 = never); got {every!r}")
        for name, value in (("samples", samples), ("concurrency", concurrency)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an int >= 1; got {value!r}")
        self.entries = list(entries)
        self.samples = samples
        self.every = every
        self.concurrency = concurrency
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.prefix = prefix
        self.progress = progress
        self.record = dict(record) if record is not None else {
            "suite": "heldout", "samples": samples, "seed": seed,
            "temperature": runner.sampling.temperature, "max_turns": runner.max_turns,
            "engine": type(engine).__name__,
        }
        self.tokenizer = tokenizer
        self.runner = EpisodeRunner(engine, tokenizer, runner)
        self.planned = plan_episodes(self.entries, samples, seed)
        self.last_results: dict[str, Any] | None = None
        self.last_records: list[dict[str, Any]] = []
        #: Why the last evaluation has no accuracy (every episode errored or timed out), or None.
        self.unmeasured: str | None = None

    def play(self, label: str) -> list[dict[str, Any]]:
        """Play every planned episode; their episodes.jsonl records, in plan order."""
        return play(self.runner, self.tokenizer, self.planned, label=label,
                    concurrency=self.concurrency, progress=self.progress)

    def maybe_evaluate(self, step: int) -> dict[str, float] | None:
        """Evaluate if ``step`` is due (``every > 0`` and ``step % every == 0``), else None.

        Returns:
            None when the step is not due; else what ``evaluate`` returns.
        """
        if self.every == 0 or step % self.every != 0:
            return None
        return self.evaluate(step)

    def evaluate(self, step: int) -> dict[str, float]:
        """Evaluate now.

        Returns:
            ``{"<prefix>/<env>/<metric>": float}`` for every env of the suite and ``"overall"``,
            with the numeric metrics of ``rlvr.eval.metrics.summarize`` (e.g.
            ``eval/overall/pass@1``, ``eval/overall/mean_reward``, ``eval/arith/maj@4``,
            ``eval/arith/mean_turns``; metrics that are n/a, such as maj@k without answers, are
            left out), and ``"<prefix>/accuracy"``: the overall pass@1, left out when every
            episode ended in an error or a timeout (``unmeasured`` then says so).
        """
        label = f"step_{step:06d}"
        records = self.play(label)
        self.last_records = records
        metrics = aggregate(records, self.samples, [e.key for e in self.entries])
        self.last_results = {
            **_results_header(self.record, self.entries),
            "step": step,
            "models": [{"label": label, "path": "(training policy)", "metrics": metrics}],
        }
        if self.out_dir is not None:
            write_outputs(self.last_results, records, self.out_dir / label)
        flat = flatten_metrics(metrics, self.prefix)
        failed = [r for r in records if r["finish_reason"] in ("error", "timeout")]
        self.unmeasured = None
        if records and len(failed) == len(records):  # nothing was measured: no accuracy
            first = str(failed[0].get("error") or failed[0]["finish_reason"]).splitlines()
            self.unmeasured = (f"every one of the {len(records)} held-out episodes ended in an "
                               f"error or a timeout (first: {first[0][:200] if first else '?'})")
            return flat
        return {**flat, f"{self.prefix}/accuracy": flat[f"{self.prefix}/overall/pass@1"]}

    def close(self) -> None:
        """Stop the runner's env threads (the engine is the caller's to close)."""
        self.runner.close()
