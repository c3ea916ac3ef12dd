"""check_env: does an env keep the TextEnv contract, and can it be gamed? (``rlvr check-env``).

In the spirit of gymnasium's env checker, for text envs with verifiable rewards. Topics, one
module each:

- ``contract``: spaces, what ``reset``/``step`` return (types, terminated/truncated, finite
  rewards inside ``reward_range``, ``info["verdict"]`` when decided, messages, reward spans,
  fresh objects, ``step`` after the end raises); checked on every episode any topic plays;
- ``determinism``: the same seed and actions give the same opening messages and verdicts;
- ``limits`` (deep): 1 MB, empty, binary-looking, unicode and deeply nested actions return in
  time and never raise out of ``step``;
- ``probes`` (deep): hedges, success claims, the prompt copied back, extraction exploits and
  cheating programs never earn full reward;
- ``tools`` (deep, tool envs): malformed calls get an error message; the tool-call limit truncates.

``check_env(env)`` raises :class:`~rlvr.envs.errors.EnvCheckError` listing what failed;
``check_env(env, deep=True)`` adds the deep topics; ``raise_on_failure=False`` returns the
:class:`CheckReport` (``report.table()`` is what ``rlvr check-env`` prints).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import gymnasium

from rlvr.envs.check.contract import RULES, check_spaces, contract_results
from rlvr.envs.check.determinism import check_determinism
from rlvr.envs.check.episode import NOT_PLAYED, Episode, Session
from rlvr.envs.check.limits import LIMIT_INPUTS, check_limits, step_budget
from rlvr.envs.check.probes import PROBE_FIXES, Reference, check_probes, task_reference
from rlvr.envs.check.report import FAIL, NOT_RUN, PASS, SKIP, CheckReport, CheckResult
from rlvr.envs.check.tools import check_tools

__all__ = [
    "DEFAULT_PROBES",
    "FAIL",
    "LIMIT_INPUTS",
    "NOT_RUN",
    "PASS",
    "PROBE_FIXES",
    "RULES",
    "SKIP",
    "CheckReport",
    "CheckResult",
    "Episode",
    "Reference",
    "Session",
    "check_env",
    "task_reference",
]

DEFAULT_PROBES = (
    "I am not sure.",
    '<tool_call>{"name": "calculator", "arguments": {"expression": "6*7"}}</tool_call>',
    "<tool_call>{not json",
    "```python\nprint(42)\n```",
    "The answer is \\boxed{42}.",
    "42",
    "",
)
"""Actions of the contract and determinism episodes, played in turn (cycled) until the end."""

def check_env(
    env: gymnasium.Env,
    *,
    deep: bool = False,
    seed: int = 0,
    actions: Sequence[str] = DEFAULT_PROBES,
    max_steps: int = 32,
    reference: Reference | None = task_reference,
    step_timeout_s: float | None = None,
    name: str | None = None,
    raise_on_failure: bool = True,
    tasks: int = 3,
    time_budget_s: float = 60.0,
    call_timeout_s: float | None = None,
) -> CheckReport:
    """Check ``env``; by default raise when anything failed.

    Args:
        env: a TextEnv, possibly wrapped (e.g. from ``gymnasium.make``).
        deep: also run the limits, probes and tools topics (``rlvr check-env`` does).
        seed: the reset seed of every episode.
        actions: the contract/determinism episodes' actions, played in turn until the end.
        max_steps: an episode still running after this many steps fails the contract.
        reference: ``reference(env) -> str | None``, the right answer of the current episode,
            for the probes that hide it among wrong ones; default :func:`task_reference` (the
            task's ``answer`` or ``solution``); None skips those probes.
        step_timeout_s: the time one step may take in the limits topic; default the env's
            ``timeout_s`` (5 s when it has none) plus 5 s.
        name: what the report calls the env (default its spec id or class name).
        raise_on_failure: raise on failures (default) instead of only returning the report.
        tasks: the contract episodes and the probes play this many tasks (reset seeds
            ``seed``, ``seed + 1``, ...); a probe fails when it fails on any of them.
        time_budget_s: no further task is started once this many seconds have passed (the
            first always plays); the report says how many were played.
        call_timeout_s: the deadline of every ``reset``/``step`` call; default three times
            the limits topic's step budget, at least 30 s. A call past it fails the row "every
            call returns in time", the env is not called again, and the rows that could not
            be judged say ``not run``.

    Returns:
        The :class:`CheckReport`, one row per check.

    Raises:
        EnvCheckError: when a check failed and ``raise_on_failure`` is True.
    """
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be an int >= 1; got {tasks!r}")
    spec = getattr(env, "spec", None)
    report = CheckReport(name or (spec.id if spec is not None else type(env.unwrapped).__name__))
    budget = step_budget(env, step_timeout_s)
    session = Session(env, seed=seed, max_steps=max_steps,
                      call_timeout_s=call_timeout_s if call_timeout_s is not None
                      else max(30.0, 3 * budget))
    check_spaces(env, session.violations)
    deadline = time.monotonic() + time_budget_s
    seeds = [seed]
    for task_seed in range(seed, seed + tasks):
        if task_seed != seed and time.monotonic() > deadline:
            break
        if task_seed != seed:
            seeds.append(task_seed)
        contract_episode = session.play(actions, seed=task_seed)
        if not contract_episode.ended and contract_episode.error is None:
            session.violations.setdefault("ends", []).append(
                f"the episode of seed {task_seed} did not end within {max_steps} steps of "
                "probe actions")
    hung_in_contract = session.hung is not None
    topics = [lambda: check_determinism(session, actions)]
    if deep:
        topics += [lambda: check_limits(session, budget),
                   lambda: _probes_over_tasks(session, reference, seeds, deadline),
                   lambda: check_tools(session)]
    for topic in topics:  # a topic during or after a hang keeps no "pass" (it may not have run)
        report.add(_after_hang(topic(), session, whole=True))
    contract = contract_results(session.violations)
    report.results[:0] = _after_hang(contract, session, whole=hung_in_contract)
    report.results = _not_run(report.results, session)
    if raise_on_failure:
        report.raise_for_failures()
    return report


def _probes_over_tasks(session: Session, reference: Reference | None, seeds: list[int],
                       deadline: float) -> list[CheckResult]:
    """The probes on each task seed; one row per probe: failed on any, else as on the first."""
    rows: dict[str, CheckResult] = {}
    first_seed = session.seed
    try:
        for i, task_seed in enumerate(seeds):
            if i and time.monotonic() > deadline:
                break
            session.seed = task_seed
            for row in check_probes(session, reference):
                kept = rows.get(row.name)
                if kept is None or (row.failed and not kept.failed):
                    detail = f"seed {task_seed}: {row.detail}" if row.failed and i else row.detail
                    rows[row.name] = dataclasses.replace(row, detail=detail)
    finally:
        session.seed = first_seed
    return list(rows.values())


def _after_hang(rows: list[CheckResult], session: Session, *, whole: bool) -> list[CheckResult]:
    """Rows that a hang kept from being judged become "not run".

    A row played after the hang says so (``not played:``); with ``whole`` (the topic ran, at
    least partly, after the hang) its passing rows may have been judged on episodes that never
    played.
    """
    if session.hung is None:
        return rows
    out = []
    for row in rows:
        skipped = NOT_PLAYED in row.detail
        keep = row.name in (RULES["hangs"][0], RULES["spaces"][0])
        if not keep and (skipped or (whole and row.status == PASS)):
            row = CheckResult(row.topic, row.name, NOT_RUN,
                              f"the env hung before this could be judged ({session.hung})",
                              "make every call return, then run the check again")
        out.append(row)
    return out


#: Contract rules that can be judged without a single usable step.
_WITHOUT_STEPS = ("spaces", "reset", "raises", "step", "hangs")


def _not_run(results: list[CheckResult], session: Session) -> list[CheckResult]:
    """Rows that passed without their episodes getting that far become "not run".

    With no usable ``reset``, only the spaces and reset rows say anything; with no usable
    ``step``, neither do the rows about what steps return.
    """
    if session.resets_ok and session.steps_ok:
        return results
    why = session.first_error or "no episode got past its opening"
    method = "reset()" if not session.resets_ok else "step()"
    judged = {RULES[k][0] for k in (("spaces", "reset", "hangs") if not session.resets_ok
                                    else _WITHOUT_STEPS)}
    out = []
    for row in results:
        if row.status == PASS and not (row.topic == "contract" and row.name in judged):
            row = CheckResult(row.topic, row.name, NOT_RUN,
                              f"no episode got past {method} ({why})",
                              f"fix {method} first, then run the check again")
        out.append(row)
    return out
