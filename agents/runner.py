"""The episode runner: many multi-turn env episodes at once on one engine, token-exact.

Every episode is a coroutine; all of them run concurrently on one asyncio loop, so the engine
sees their generation requests together and batches them. Each turn:

1. the engine is given the episode's whole token sequence so far (``prompt_ids + response_ids``),
   never a re-rendering of the messages;
2. its tokens are appended exactly as generated (``response_mask`` 1, including the end-of-turn
   token it generated) and decoded into the action text;
3. ``env.step(action)`` runs on an env thread with a timeout (a slow sandbox never stalls the
   loop); the turn's reward goes on the turn's last model token, reward spans on the tokens
   covering their last character. To keep trips to the env threads few, making and resetting
   the env is one call, and so are the last turn's step and the env's close, and the calls
   issued in one event-loop iteration travel together (``rlvr.agents.env_calls``);
4. the env's messages are appended as the chat template's token delta (``rlvr.agents.chat``), with
   ``response_mask`` 0, right before the next turn.

Why an episode ends (``Trajectory.finish_reason``):

* "stop": the env terminated (the task was decided);
* "truncated": the env truncated (its own turn/budget limit);
* "max_turns": ``RunnerConfig.max_turns`` turns were played without the env deciding;
* "length": a token budget ran out: the model hit ``max_tokens_per_turn`` without ending its turn
  (the env is NOT stepped with a cut-off action, and the turn earns no reward), or the episode's
  ``max_response_tokens`` leaves no room for the next env delta plus one model token;
* "timeout": an env call (make and reset, a step) ran past ``env_step_timeout_s``; its work is
  stopped (``rlvr.agents.env_calls``) and the episode is kept like an "error" one (not trained on);
* "error": the env raised (make, reset or step), or broke the TextEnv contract. The
  episode keeps the tokens it had, all its scores are set to 0, the error is logged with the task
  id and stored in ``Trajectory.outcome.error``; the other episodes go on. When even ``reset``
  failed, ``prompt_ids`` is ``[pad_token_id]`` and the response is empty; trainers may drop
  ``finish_reason == "error"`` rows.

What the episode came to is built here, once: ``Trajectory.outcome`` (``rlvr.batch.EpisodeOutcome``)
holds the last ``info["verdict"]`` as the env made it, the extracted answer (``info["answer"]``,
else the verdict's ``details["extracted"]``), the turns, the tool calls and tool errors, and the
error. Envs only return gymnasium's Verdict/info; training metrics and evaluation read the outcome.

Each episode is opened once (``open_episode``: make or take an idle env, ``reset``, render the
prompt), on the env threads or ahead of its run (``open_ahead``: ``rlvr.agents.opening``), and
then played by the player chosen for it: the turns player (``rlvr.agents.turns``) or, for an
``rlvr.envs.AgentEnv`` (an agent function registered as an env), its agent through the gateway
(``rlvr.agents.gateway.agent``): the same trajectories, one per episode, with ``extra_rows`` when
the agent's calls did not extend each other.

Env messages returned with the final step (or when the turn budget ends the episode) are kept in
``metadata["messages"]`` but not appended as tokens: the sequence always ends with a model token.
A model turn cut off by its token budget is kept there too (as the text it got to), but never
sent to the env.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.engine import Engine
from rlvr.agents.env_calls import EnvCallKilled, EnvCalls
from rlvr.agents.env_pool import EnvPool
from rlvr.agents.episode import EpisodeRecord, jsonable
from rlvr.agents.episode_state import EpisodeState, close_quietly, raised_by_env
from rlvr.agents.errors import EnvContractError
from rlvr.agents.event_loop import KeptLoop
from rlvr.agents.opening import OpenAhead, Opening, Plan
from rlvr.agents.runner_config import EpisodeSpec, RunnerConfig, group_specs, turn_seed
from rlvr.agents.turns import TurnsPlayer
from rlvr.envs.agent_env import AgentEnv
from rlvr.envs.base import Message
from rlvr.trajectory import Trajectory

logger = logging.getLogger(__name__)
T = TypeVar("T")

#: Runs an env call: on an env thread (``EnvCalls.call``), or inline (``_call_inline``).
EnvCall = Callable[..., Awaitable[Any]]
#: Plays one opened episode: ``(index, state, base_seed) -> Trajectory``.
Player = Callable[[int, EpisodeState, int | None], Awaitable[Trajectory]]


class EpisodeRunner:
    """Plays episodes on an engine and returns token-exact trajectories.

    Args:
        engine: any ``rlvr.agents.engine.Engine``.
        tokenizer: the policy's tokenizer (its chat template renders prompts and env deltas).
        config: limits, checks and sampling; ``RunnerConfig()`` by default.

    Raises:
        ChatTemplateError: the tokenizer's chat template is not prefix-stable.
    """

    def __init__(self, engine: Engine, tokenizer: Any, config: RunnerConfig | None = None) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.config = config or RunnerConfig()
        self.renderer = ChatRenderer(tokenizer)
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_id = pad if isinstance(pad, int) else self.renderer.end_of_turn_id
        self._env_calls = EnvCalls(self.config.env_workers, self.config.env_step_timeout_s)
        self._pool = EnvPool(self.config.reuse_envs)
        # (the parts get no bound method of the runner: no reference cycle keeps a dropped
        # runner, its threads and its envs alive until a garbage collection)
        self._turns = TurnsPlayer(engine, tokenizer, self.renderer, self.config,
                                  self._env_calls.call, fail_episode, self._pad_id)
        self._ahead = OpenAhead(self._pool.release_now, self.config.env_step_timeout_s)
        self._loop = KeptLoop()
        self._agents: Any = None

    # ------------------------------------------------------------------ public API
    def run(
        self, specs: Sequence[EpisodeSpec], *, group_size: int = 1, seed: int | None = None
    ) -> list[Trajectory]:
        """Synchronous ``arun`` (works inside a running event loop too, via a helper thread)."""
        return self.run_coroutine(self.arun(specs, group_size=group_size, seed=seed))

    def run_coroutine(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` (e.g. several ``arun`` calls gathered) to completion; its result.

        On this runner's event loop, kept from one call to the next (``rlvr.agents.event_loop``:
        ~0.5 ms less per call than ``asyncio.run``); from a thread that already runs a loop,
        on a fresh loop in a helper thread.
        """
        return self._loop.run(coro)

    async def arun(
        self, specs: Sequence[EpisodeSpec], *, group_size: int = 1, seed: int | None = None,
        opened: Opening | None = None,
    ) -> list[Trajectory]:
        """Play every spec (``group_size`` times each) concurrently.

        Args:
            specs: the episodes (or tasks, with ``group_size > 1``).
            group_size: episodes per spec; they share a ``group_id`` (see ``group_specs``).
            seed: base sampling seed for this run (default ``config.seed``); a trainer passes a
                different one per step. Episode ``i``'s turn ``t`` samples with
                ``turn_seed(seed, i, t)``, so a run is reproducible.
            opened: these episodes' openings from ``open_ahead`` (same specs and group size):
                the run starts at their first turn.

        Returns:
            One ``Trajectory`` per episode, in order (task-major when grouped).

        Raises:
            RunnerConfigError: ``opened`` was made for other specs, or was used before.
        """
        base = self.config.seed if seed is None else seed
        if opened is not None:  # its plan was made for these specs (checked)
            states = list(await self._take_opening(opened, specs, group_size))
            grouped, keys = opened.plan
        else:
            grouped, keys = self._plan(specs, group_size)
            states = [None] * len(grouped)
        tasks = [
            asyncio.ensure_future(self._play(i, s, base, k, st))
            for i, (s, k, st) in enumerate(zip(grouped, keys, states))
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            raise

    def open_ahead(self, runs: Sequence[tuple[Sequence[EpisodeSpec], int]]) -> list[Opening]:
        """Open the episodes of coming ``arun`` calls now, on a background thread.

        Each episode's opening (make or take an idle env, ``reset``, render the prompt) does not
        depend on the policy, so a trainer opens the next step's episodes while this step
        trains: their Python then runs beside the update's compute (on the second core) instead
        of in front of the next rollout (``rlvr.agents.opening``). The episodes are the same as
        without: ``arun(specs, group_size=g, opened=o)`` plays them from their first turn.

        Args:
            runs: ``(specs, group_size)`` of each coming ``arun``.

        Returns:
            One ``Opening`` per run, in order; each is used once by ``arun``, or handed back
            with ``discard``. ``close`` releases the envs of openings never used.
        """
        return self._ahead.open(runs, [self._plan(specs, g) for specs, g in runs],
                                self._open_inline)

    def discard(self, openings: Sequence[Opening]) -> None:
        """Hand back openings that will not be played: their envs go idle or are closed."""
        self._ahead.discard(openings)

    def close(self) -> None:
        """Release unused openings, close the idle envs and shut the env threads down.

        Threads stuck in timed-out env calls are abandoned.
        """
        self._ahead.close()
        self._pool.close()
        self._env_calls.close()
        self._loop.close()

    # ------------------------------------------------------------------ opening an episode
    def _plan(self, specs: Sequence[EpisodeSpec], group_size: int) -> Plan:
        """The episodes of a run (grouped) and each one's idle-env pool key."""
        if group_size != 1 or any(s.group_id is None for s in specs):
            specs = group_specs(specs, group_size)
        keys: dict[tuple[str | None, int], str | None] = {}  # a group's specs share env_kwargs
        for s in specs:
            ident = (s.env_id, id(s.env_kwargs))
            if ident not in keys:
                keys[ident] = self._pool.key(s)
        return list(specs), [keys[s.env_id, id(s.env_kwargs)] for s in specs]

    async def _take_opening(self, opening: Opening, specs: Sequence[EpisodeSpec],
                            group_size: int) -> list[EpisodeState | None]:
        """This run's opened states (None: left for the run to open), once the job has them.

        The episode stuck in a reset past ``env_step_timeout_s`` fails with ``TimeoutError``
        (see ``rlvr.agents.opening``).
        """
        row, stuck = await self._ahead.take(opening, specs, group_size)
        if stuck is not None:
            grouped, keys = opening.plan
            state = EpisodeState(spec=grouped[stuck], env_id=grouped[stuck].env_id or "",
                                  reuse_key=keys[stuck])
            fail_episode(stuck, state, TimeoutError(
                f"reset took longer than env_step_timeout_s={self.config.env_step_timeout_s}"))
            row[stuck] = state
        return row

    async def open_episode(self, index: int, spec: EpisodeSpec, key: str | None,
                           call: EnvCall | None = None) -> EpisodeState:
        """Make (or take an idle) env, reset it and render the prompt: the episode's opening.

        Args:
            index: the episode's index in its run (for the log).
            spec: the episode.
            key: its idle-env pool key.
            call: how the env calls run: on an env thread (the default) or inline in this
                thread (``open_ahead``'s, through ``_open_inline``).

        Returns:
            The opened state; an env error (or a broken TextEnv contract) fails the episode
            (``state.exc``). Any other exception stops the run (its env is closed first).
        """
        call = call or self._env_call
        state = EpisodeState(spec=spec, env_id=spec.env_id or "", reuse_key=key,
                              env=self._pool.take(key))

        def make_and_reset() -> Any:
            if state.env is None:
                state.env = spec.make_env()
            return state.env.reset(seed=spec.seed, options=spec.options)

        try:
            self._opened(state, *await call(make_and_reset))
        except EnvCallKilled:  # open-ahead's run gave up waiting: the env it made is closed
            await self._release(state, call)
            raise
        except Exception as exc:
            if not (isinstance(exc, EnvContractError) or raised_by_env(exc)):
                await self._release(state, call)
                raise
            fail_episode(index, state, exc)
        return state

    def _open_inline(self, index: int, spec: EpisodeSpec, key: str | None) -> EpisodeState:
        """``open_episode`` in the calling thread (``open_ahead``'s): no loop, no env thread."""
        return _run_inline(self.open_episode(index, spec, key, _call_inline))

    def _opened(self, state: EpisodeState, messages: Sequence[Message], info: dict[str, Any]
                ) -> None:
        """Fill ``state`` from the env's ``reset``: task, tools, messages, the prompt's tokens."""
        if not state.spec.env_id:
            env_spec = getattr(state.env, "spec", None)
            state.env_id = getattr(env_spec, "id", None) or type(state.env).__name__
        state.task_id = str(info.get("task_id", ""))
        state.tools = info.get("tools") or None
        if isinstance(info.get("task_metadata"), dict):
            state.task_metadata = jsonable(info["task_metadata"])
        state.messages = [dict(m) for m in messages]
        state.record = EpisodeRecord(self.renderer.prompt_ids(messages, state.tools),
                                     keep_contexts=self.config.check_token_exact)

    # ------------------------------------------------------------------ playing an episode
    async def _play(
        self, index: int, spec: EpisodeSpec, base_seed: int | None, key: str | None,
        opened: EpisodeState | None = None,
    ) -> Trajectory:
        """Open the episode (unless ``opened``), play it with its player, release its env."""
        state = opened if opened is not None else await self.open_episode(index, spec, key)
        play = self._player(state)
        try:
            return await play(index, state, base_seed)
        finally:
            await self._release(state)

    def _player(self, state: EpisodeState) -> Player:
        """Who plays the opened ``state``: an agent env's agent, else the turns player."""
        if state.exc is None and isinstance(getattr(state.env, "unwrapped", None), AgentEnv):
            return self._play_agent
        return self._turns.play

    async def _play_agent(self, index: int, state: EpisodeState, base_seed: int | None
                          ) -> Trajectory:
        """An agent function's episode, played through the gateway."""
        traj = await self._agent_player().play(index, state, base_seed, self._env_call,
                                               self._pad_id)
        state.reusable = state.reuse_key is not None and state.exc is None
        return traj

    def _agent_player(self) -> Any:
        """The ``rlvr.agents.gateway.agent.AgentPlayer`` of this runner (made on first use)."""
        if self._agents is None:
            from rlvr.agents.gateway.agent import AgentPlayer

            self._agents = AgentPlayer(self.engine, self.tokenizer, self.config, self.renderer)
        return self._agents

    async def _env_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on an env thread (batched with this loop iteration's other calls)."""
        return await self._env_calls.call(fn, *args)

    async def _release(self, state: EpisodeState, call: EnvCall | None = None) -> None:
        """Keep the episode's env for reuse, or close it (not one stuck in a timed-out call)."""
        kept = state.reusable and self._pool.give(state.reuse_key, state.env)
        if not kept and state.env is not None and not state.closed \
                and not isinstance(state.exc, TimeoutError):
            state.closed = True
            try:
                await (call or self._env_call)(close_quietly, state.env)
            except Exception as exc:  # closing is best effort
                logger.warning("env.close() failed: %r", exc)


def fail_episode(index: int, state: EpisodeState, exc: BaseException) -> None:
    """End ``state``'s episode with an error (logged with its task)."""
    state.fail(exc)
    logger.warning("episode %d (env %s, task %s) ended with an error: %r",
                   index, state.env_id, state.task_id or "?", exc)


async def _call_inline(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` right here: the env call of an opening run inline."""
    return fn(*args)


def _run_inline(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end in this thread, without an event loop.

    Only for coroutines that never suspend (their awaits are ``_call_inline``'s).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("a coroutine run inline tried to suspend")


def run_episodes(
    engine: Engine,
    tokenizer: Any,
    specs: Sequence[EpisodeSpec],
    config: RunnerConfig | None = None,
    *,
    group_size: int = 1,
    seed: int | None = None,
) -> list[Trajectory]:
    """Play ``specs`` synchronously with a throw-away ``EpisodeRunner`` (see its ``run``)."""
    runner = EpisodeRunner(engine, tokenizer, config)
    try:
        return runner.run(specs, group_size=group_size, seed=seed)
    finally:
        runner.close()


__all__ = [
    "EpisodeRunner", "EpisodeSpec", "RunnerConfig", "group_specs", "run_episodes", "turn_seed",
]
