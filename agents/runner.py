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

An ``rlvr.envs.AgentEnv`` (an agent function registered as an env) is played by its agent through
the gateway instead (``rlvr.agents.gateway.agent``): the same trajectories, one per episode, with
``extra_rows`` when the agent's calls did not extend each other.

Env messages returned with the final step (or when the turn budget ends the episode) are kept in
``metadata["messages"]`` but not appended as tokens: the sequence always ends with a model token.
A model turn cut off by its token budget is kept there too (as the text it got to), but never
sent to the env.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.engine import Engine, SamplingParams
from rlvr.agents.env_calls import EnvCallKilled, EnvCalls, EnvThreads, raise_in_thread
from rlvr.agents.env_pool import EnvPool
from rlvr.agents.episode import EpisodeRecord, jsonable
from rlvr.agents.episode_state import EpisodeState, close_quietly, raised_by_env, step_and_close
from rlvr.agents.errors import EngineAbortedError, EnvContractError, RunnerConfigError
from rlvr.agents.event_loop import KeptLoop
from rlvr.agents.opening import OpenAheadJob, Opening
from rlvr.agents.runner_config import EpisodeSpec, RunnerConfig, group_specs, turn_seed
from rlvr.envs.agent_env import AgentEnv
from rlvr.envs.base import Message
from rlvr.trajectory import Trajectory

logger = logging.getLogger(__name__)
T = TypeVar("T")

TOOL_CALL_END = "</tool_call>"


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
        ids = tokenizer.encode(TOOL_CALL_END, add_special_tokens=False)
        self._tool_stop_id: int | None = ids[0] if len(ids) == 1 else None
        eos = getattr(tokenizer, "eos_token_id", None)
        self._end_ids = {self.renderer.end_of_turn_id} | ({eos} if isinstance(eos, int) else set())
        pad = getattr(tokenizer, "pad_token_id", None)
        self._pad_id = pad if isinstance(pad, int) else self.renderer.end_of_turn_id
        self._env_calls = EnvCalls(self.config.env_workers, self.config.env_step_timeout_s)
        self._pool = EnvPool(self.config.reuse_envs)
        self._openings_lock = threading.Lock()
        self._sampling_memo: dict[tuple[int, bool], SamplingParams] = {}
        self._opener: EnvThreads | None = None  # a daemon thread: a hung reset never blocks exit
        self._openings: list[Opening] = []
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
        plans = [self._plan(specs, g) for specs, g in runs]
        job = OpenAheadJob([[None] * len(grouped) for grouped, _ in plans])
        if self._opener is None:
            self._opener = EnvThreads(1, "open-ahead")
        openings = [Opening(tuple(specs), g, job, j, plan)
                    for j, ((specs, g), plan) in enumerate(zip(runs, plans))]
        with self._openings_lock:
            self._openings.extend(openings)
        self._opener.submit(self._open_all_now, plans, job)
        return openings

    def discard(self, openings: Sequence[Opening]) -> None:
        """Hand back openings that will not be played: their envs go idle or are closed."""
        for opening in openings:
            if self._claim(opening):
                self._pool.release_now(self._settled_states(opening), keep=True)

    def close(self) -> None:
        """Release unused openings, close the idle envs and shut the env threads down.

        Threads stuck in timed-out env calls are abandoned.
        """
        with self._openings_lock:
            unused, self._openings = self._openings, []
        for opening in unused:
            opening.used = True
            self._pool.release_now(self._settled_states(opening), keep=False)
        if self._opener is not None:
            self._opener.close()
            self._opener = None
        self._pool.close()
        self._env_calls.close()
        self._loop.close()

    # ------------------------------------------------------------------ openings
    def _plan(self, specs: Sequence[EpisodeSpec], group_size: int
              ) -> tuple[list[EpisodeSpec], list[str | None]]:
        """The episodes of a run (grouped) and each one's idle-env pool key."""
        if group_size != 1 or any(s.group_id is None for s in specs):
            specs = group_specs(specs, group_size)
        keys: dict[tuple[str | None, int], str | None] = {}  # a group's specs share env_kwargs
        for s in specs:
            ident = (s.env_id, id(s.env_kwargs))
            if ident not in keys:
                keys[ident] = self._pool.key(s)
        return list(specs), [keys[s.env_id, id(s.env_kwargs)] for s in specs]

    def _claim(self, opening: Opening) -> bool:
        """Mark ``opening`` used; False when it already was."""
        with self._openings_lock:
            if opening.used:
                return False
            opening.used = True
            if opening in self._openings:
                self._openings.remove(opening)
            return True

    async def _take_opening(self, opening: Opening, specs: Sequence[EpisodeSpec],
                            group_size: int) -> list[EpisodeState | None]:
        """This run's opened states (None: left for the run to open), once the job has them.

        Waits at most ``env_step_timeout_s``; then the job is stopped and the episode stuck in
        its call fails with ``TimeoutError`` (see ``rlvr.agents.opening``).
        """
        same = opening.group_size == group_size and len(opening.specs) == len(specs) and all(
            a is b or a == b for a, b in zip(opening.specs, specs))
        if not self._claim(opening):
            raise RunnerConfigError("this Opening was already used (or discarded)")
        if not opening.job.settled.done():  # (a trainer's openings are done by now)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(opening.job.settled)),
                                       self.config.env_step_timeout_s)
        opening.job.stop_unless_done()
        row, stuck = opening.taken()
        if not same:
            self._pool.release_now(row, keep=True)
            raise RunnerConfigError("arun(opened=...) was given an Opening made for other specs "
                                    "or another group_size")
        errors = [s for s in row if isinstance(s, BaseException)]
        if errors:  # an agent error while opening stops the run, as it would in arun
            self._pool.release_now(row, keep=True)
            raise errors[0]
        if stuck is not None:
            grouped, keys = opening.plan
            state = EpisodeState(spec=grouped[stuck], env_id=grouped[stuck].env_id or "",
                                  reuse_key=keys[stuck])
            self._fail(stuck, state, TimeoutError(
                f"reset took longer than env_step_timeout_s={self.config.env_step_timeout_s}"))
            row[stuck] = state
        return row

    def _settled_states(self, opening: Opening) -> list[Any]:
        """``opening``'s states once its job has them (stopping it after the timeout)."""
        with contextlib.suppress(concurrent.futures.TimeoutError):
            opening.job.settled.result(self.config.env_step_timeout_s)
        opening.job.stop_unless_done()
        return opening.taken()[0]

    def _open_all_now(self, plans: list[tuple[list[EpisodeSpec], list[str | None]]],
                      job: OpenAheadJob) -> None:
        """The job's background thread: open its episodes one by one, until done or stopped."""
        job.thread = threading.get_ident()
        try:
            for run, (grouped, keys) in enumerate(plans):
                for i, (spec, key) in enumerate(zip(grouped, keys)):
                    with job.lock:
                        if job.stopped:
                            return
                        job.current = (run, i)
                    out: EpisodeState | BaseException
                    try:
                        out = self._open_now(i, spec, key)
                    except BaseException as exc:  # an agent error: raised in the run
                        out = exc
                    with job.lock:
                        job.current = None
                        stored = not job.stopped
                        if stored:
                            job.states[run][i] = out
                    if not stored:  # its run gave up waiting and opens the rest itself
                        self._pool.release_now([out], keep=False)
                        return
        finally:
            with job.lock:
                job.current = None
                job.settle()
                raise_in_thread(job.thread, None)  # a stop sent as the call returned

    # ------------------------------------------------------------------ one episode
    async def _env_call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on an env thread (batched with this loop iteration's other calls)."""
        return await self._env_calls.call(fn, *args)

    async def _open(self, index: int, spec: EpisodeSpec, key: str | None) -> EpisodeState:
        """Make (or take an idle) env, reset it and render the prompt: the episode's opening.

        The env calls run on an env thread. An env error (or a broken TextEnv contract) fails
        the episode (``state.exc``); any other exception stops the run.
        """
        state = EpisodeState(spec=spec, env_id=spec.env_id or "", reuse_key=key,
                              env=self._pool.take(key))

        def make_and_reset() -> Any:
            if state.env is None:
                state.env = spec.make_env()
            return state.env.reset(seed=spec.seed, options=spec.options)

        try:
            self._opened(state, *await self._env_call(make_and_reset))
        except Exception as exc:
            if not (isinstance(exc, EnvContractError) or raised_by_env(exc)):
                await self._release(state)
                raise
            self._fail(index, state, exc)
        return state

    def _open_now(self, index: int, spec: EpisodeSpec, key: str | None) -> EpisodeState:
        """``_open`` in the calling thread (``open_ahead``'s): no loop, no env thread."""
        state = EpisodeState(spec=spec, env_id=spec.env_id or "", reuse_key=key,
                              env=self._pool.take(key))
        try:
            if state.env is None:
                state.env = spec.make_env()
            self._opened(state, *state.env.reset(seed=spec.seed, options=spec.options))
        except EnvCallKilled:  # its run gave up waiting: the env it made is closed
            self._pool.release_now([state], keep=False)
            raise
        except Exception as exc:
            if not (isinstance(exc, EnvContractError) or raised_by_env(exc)):
                self._pool.release_now([state], keep=False)
                raise
            self._fail(index, state, exc)
        return state

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

    async def _play(
        self, index: int, spec: EpisodeSpec, base_seed: int | None, key: str | None,
        opened: EpisodeState | None = None,
    ) -> Trajectory:
        state = opened if opened is not None else await self._open(index, spec, key)
        if state.exc is None and isinstance(getattr(state.env, "unwrapped", None), AgentEnv):
            try:  # an agent function's episode: played through the gateway
                traj = await self._agent_player().play(index, state, base_seed, self._env_call,
                                                       self._pad_id)
                state.reusable = key is not None and state.exc is None
                return traj
            finally:
                await self._release(state)
        try:
            if state.exc is None:
                state.finish_reason = await self._turns(index, state, base_seed)
                state.reusable = key is not None
        except Exception as exc:
            if isinstance(exc, EnvContractError) or raised_by_env(exc):
                self._fail(index, state, exc)
            else:
                raise
        finally:
            await self._release(state)
        if state.record is not None and self.config.check_token_exact:
            state.record.check()
        return state.to_trajectory(self._pad_id)

    def _agent_player(self) -> Any:
        """The ``rlvr.agents.gateway.agent.AgentPlayer`` of this runner (made on first use)."""
        if self._agents is None:
            from rlvr.agents.gateway.agent import AgentPlayer

            self._agents = AgentPlayer(self.engine, self.tokenizer, self.config, self.renderer)
        return self._agents

    def _fail(self, index: int, state: EpisodeState, exc: BaseException) -> None:
        """End ``state``'s episode with an error (logged with its task)."""
        state.fail(exc)
        logger.warning("episode %d (env %s, task %s) ended with an error: %r",
                       index, state.env_id, state.task_id or "?", exc)

    async def _release(self, state: EpisodeState) -> None:
        """Keep the episode's env for reuse, or close it (not one stuck in a timed-out call)."""
        kept = state.reusable and self._pool.give(state.reuse_key, state.env)
        if not kept and state.env is not None and not state.closed \
                and not isinstance(state.exc, TimeoutError):
            state.closed = True
            await self._close_env(state.env)

    async def _turns(self, index: int, state: EpisodeState, base_seed: int | None) -> str:
        """Play turns until the episode ends; returns the finish reason."""
        cfg = self.config
        record = state.record
        if record is None:  # pragma: no cover - set by _play before calling
            raise RuntimeError("_turns called before reset")
        pending: list[int] = []
        for turn in range(cfg.max_turns):
            record.add_env_tokens(pending)
            room = cfg.max_response_tokens - len(record.response_ids)
            budget = min(cfg.max_tokens_per_turn, room)
            sampling = self._sampling(state, budget, base_seed, index, turn)
            context = record.context()
            out = await self.engine.generate(context, sampling)
            start = record.add_model_turn(context, out.token_ids, out.logprobs, out.versions)
            state.turns += 1
            if out.finish_reason == "abort":
                raise EngineAbortedError(f"the engine aborted turn {turn}")
            if not out.token_ids:
                return "length"
            action_tokens = out.token_ids
            if action_tokens[-1] in self._end_ids:
                action_tokens = action_tokens[:-1]
            action = self.renderer.decode(action_tokens)
            state.messages.append({"role": "assistant", "content": action})
            if out.finish_reason == "length":  # cut off: recorded, never sent to the env
                return "length"
            if turn == cfg.max_turns - 1 and state.reuse_key is None:
                state.closed = True  # the episode ends after this step whatever it says
                step = await self._env_call(step_and_close, state.env, action)
            else:
                step = await self._env_call(state.env.step, action)
            obs, reward, terminated, truncated, info = step
            record.add_turn_rewards(
                self.renderer, start, action_tokens, action, reward, info.get("reward_spans"),
                getattr(getattr(state.env, "unwrapped", state.env), "reward_range", None),
            )
            state.note_step(action, obs, info)
            if terminated:
                return "stop"
            if truncated:
                return "truncated"
            pending = self.renderer.turn_close(out.token_ids) + self.renderer.env_delta(
                obs, state.tools
            )
            if len(record.response_ids) + len(pending) + 1 > cfg.max_response_tokens:
                return "length"
        return "max_turns"

    def _sampling(
        self, state: EpisodeState, budget: int, base_seed: int | None, index: int, turn: int
    ) -> SamplingParams:
        seed = None if base_seed is None else turn_seed(base_seed, index, turn)
        return self._unseeded(budget, bool(state.tools)).seeded(seed)

    def _unseeded(self, budget: int, tools: bool) -> SamplingParams:
        """The sampling params of a turn with ``budget`` tokens, before its seed (memoised)."""
        key = (budget, tools)
        params = self._sampling_memo.get(key)
        if params is None:
            base = self.config.sampling
            stop_ids = {*base.stop_token_ids, self.renderer.end_of_turn_id}
            stops = list(base.stop)
            if tools and self.config.stop_at_tool_call:
                if self._tool_stop_id is not None:
                    stop_ids.add(self._tool_stop_id)
                elif TOOL_CALL_END not in stops:
                    stops.append(TOOL_CALL_END)
            params = self._sampling_memo[key] = base.replace(
                max_new_tokens=budget, stop_token_ids=tuple(sorted(stop_ids)), stop=tuple(stops)
            )
        return params

    async def _close_env(self, env: Any) -> None:
        try:
            await self._env_call(close_quietly, env)
        except Exception as exc:  # closing is best effort
            logger.warning("env.close() failed: %r", exc)


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
    "TOOL_CALL_END", "EpisodeRunner", "EpisodeSpec", "RunnerConfig", "group_specs",
    "run_episodes", "turn_seed",
]
