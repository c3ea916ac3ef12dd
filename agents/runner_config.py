"""What an ``EpisodeRunner`` is asked to play and under which limits.

``RunnerConfig`` holds the runner's limits and checks (``RunnerLimits``, the keys a training
config's ``rollout.runner`` takes), its sampling and base seed (validated on construction);
``EpisodeSpec`` is one episode to play (an env id or factory, the reset seed and options, the
group); ``group_specs`` repeats specs into GRPO groups; ``turn_seed`` derives each turn's sampling
seed from a run's base seed. ``rlvr.agents.runner`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rlvr.agents.engine import SamplingParams
from rlvr.agents.errors import RunnerConfigError
from rlvr.config_checks import bounded, check_fields
from rlvr.envs.base import TextEnv
from rlvr.seeds import derived_seed


@dataclass(frozen=True, kw_only=True)
class RunnerLimits:
    """Limits and checks of the episode runner (validated on construction).

    Attributes:
        max_turns: model turns per episode (``>= 1``).
        max_tokens_per_turn: the most tokens the model may generate in one turn (``>= 1``).
        max_response_tokens: the most response tokens (model AND env) per episode (``>= 1``).
        env_step_timeout_s: wall-clock limit of one env call (make and reset together, a step,
            the last step and the close together), ``> 0``. The thread running a timed-out call
            cannot be killed; envs should enforce their own limits (sandboxes do), this is the
            backstop.
        env_workers: threads running env calls (``>= 1``).
        reuse_envs: keep up to this many idle envs per (env id, kwargs) and reset them for later
            episodes instead of making a fresh env each time, as gymnasium's vector envs do
            (``reset`` must fully reset the env); only envs made from an ``env_id`` whose episode
            ended without an error are kept. 0 = a fresh env per episode. Making an env costs
            more than playing a one-turn math episode.
        check_token_exact: verify every episode with ``EpisodeRecord.check`` (on in tests;
            costs one copy of each turn's context).
        stop_at_tool_call: when the env offers tools, also stop generation at the end of a tool
            call (the ``</tool_call>`` token, or the string if it is several tokens), so the env
            runs the call before the model goes on.
    """

    max_turns: int = bounded(4, ge=1)
    max_tokens_per_turn: int = bounded(256, ge=1)
    max_response_tokens: int = bounded(1024, ge=1)
    env_step_timeout_s: float = bounded(60.0, gt=0)
    env_workers: int = bounded(8, ge=1)
    reuse_envs: int = bounded(0, ge=0)
    check_token_exact: bool = False
    stop_at_tool_call: bool = True

    def __post_init__(self) -> None:
        """Validate every field (``RunnerConfigError``'s ``key`` names the field)."""
        check_fields(self, error=RunnerConfigError)

    def limits(self) -> dict[str, Any]:
        """The limit fields by name (to build another ``RunnerLimits`` subclass from them)."""
        return {f.name: getattr(self, f.name) for f in fields(RunnerLimits)}


@dataclass(frozen=True, kw_only=True)
class RunnerConfig(RunnerLimits):
    """The episode runner's limits and checks (``RunnerLimits``), its sampling and base seed.

    Attributes:
        sampling: temperature, top_p, top_k and extra stops; its ``max_new_tokens`` and ``seed``
            are replaced per turn (the turn budget and the derived seed).
        seed: base of the per-turn sampling seeds (see ``turn_seed``); None = unseeded.
    """

    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = bounded(0, ge=0)


@dataclass(frozen=True, kw_only=True)
class EpisodeSpec:
    """One episode to play.

    Attributes:
        env_id: a registered gymnasium id (e.g. "rlvr/Math-v0"); exclusive with ``env_factory``.
        env_kwargs: keyword arguments for ``make(env_id, ...)``.
        env_factory: a zero-argument callable returning a fresh ``TextEnv``.
        seed: the ``reset`` seed (picks the task in most envs).
        options: the ``reset`` options.
        group_id: episodes of the same task in one step share it (GRPO's uid); ``group_specs``
            and ``run(..., group_size=G)`` fill it with the task's index when None.
    """

    env_id: str | None = None
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    env_factory: Callable[[], TextEnv] | None = None
    seed: int | None = None
    options: dict[str, Any] | None = None
    group_id: Any = None

    def __post_init__(self) -> None:
        """Require exactly one of ``env_id`` and ``env_factory``."""
        if (self.env_id is None) == (self.env_factory is None):
            raise RunnerConfigError(
                "EpisodeSpec needs exactly one of env_id (a registered id) and env_factory; got "
                f"env_id={self.env_id!r}, env_factory={self.env_factory!r}"
            )
        if self.env_factory is not None and self.env_kwargs:
            raise RunnerConfigError("EpisodeSpec.env_kwargs only applies with env_id")

    def make_env(self) -> Any:
        """A fresh env for this spec (``rlvr.envs.make``/``gymnasium.make`` or the factory)."""
        if self.env_factory is not None:
            return self.env_factory()
        import gymnasium

        from rlvr import envs

        make: Callable[..., Any] = getattr(envs, "make", None) or gymnasium.make
        return make(self.env_id, **self.env_kwargs)


def group_specs(specs: Sequence[EpisodeSpec], group_size: int) -> list[EpisodeSpec]:
    """Each spec repeated ``group_size`` times in a row (task-major), sharing a group id.

    A spec without ``group_id`` gets its index in ``specs``.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise RunnerConfigError(f"group_size must be an int >= 1; got {group_size!r}")
    out: list[EpisodeSpec] = []
    for i, spec in enumerate(specs):
        # Specs are frozen: the episodes of a group can share one (a copy each cost more than a
        # one-turn episode's own bookkeeping).
        member = spec if spec.group_id is not None else replace(spec, group_id=i)
        out.extend([member] * group_size)
    return out


def turn_seed(base: int, episode: int, turn: int) -> int:
    """The sampling seed of ``turn`` of episode number ``episode`` in a run seeded ``base``."""
    return derived_seed(base, episode, turn, bits=63)


__all__ = ["EpisodeSpec", "RunnerConfig", "RunnerLimits", "group_specs", "turn_seed"]
