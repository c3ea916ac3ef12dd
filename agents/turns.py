"""The turns player: plays an opened episode turn by turn on the engine, token-exact.

The player ``rlvr.agents.runner.EpisodeRunner`` chooses for every episode but an agent env's
(those go through the gateway: ``rlvr.agents.gateway.agent.AgentPlayer``). Each turn gives the
engine the episode's whole token sequence, appends the tokens it generated, steps the env with
their text and appends the env's messages as the chat template's token delta; the runner's
module docstring says why an episode ends.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.engine import Engine, SamplingParams
from rlvr.agents.episode_state import EpisodeState, raised_by_env, step_and_close
from rlvr.agents.errors import EngineAbortedError, EnvContractError
from rlvr.agents.runner_config import RunnerConfig, turn_seed
from rlvr.trajectory import Trajectory

TOOL_CALL_END = "</tool_call>"


class TurnsPlayer:
    """Plays opened episodes turn by turn (one per runner: it memoises the turns' sampling).

    Args:
        engine: the runner's engine.
        tokenizer: the policy's tokenizer.
        renderer: the runner's chat renderer.
        config: the runner's limits and sampling.
        env_call: runs an env call on an env thread (``EnvCalls.call``).
        fail: ends an episode with an error (logged with its task).
        pad_id: the pad token of an episode without a prompt.
    """

    def __init__(self, engine: Engine, tokenizer: Any, renderer: ChatRenderer,
                 config: RunnerConfig, env_call: Callable[..., Awaitable[Any]],
                 fail: Callable[[int, EpisodeState, BaseException], None], pad_id: int) -> None:
        self.engine = engine
        self.renderer = renderer
        self.config = config
        self._env_call = env_call
        self._fail = fail
        self._pad_id = pad_id
        ids = tokenizer.encode(TOOL_CALL_END, add_special_tokens=False)
        self._tool_stop_id: int | None = ids[0] if len(ids) == 1 else None
        eos = getattr(tokenizer, "eos_token_id", None)
        self._end_ids = {renderer.end_of_turn_id} | ({eos} if isinstance(eos, int) else set())
        self._sampling_memo: dict[tuple[int, bool], SamplingParams] = {}

    async def play(self, index: int, state: EpisodeState, base_seed: int | None) -> Trajectory:
        """Play ``state``'s turns (none when its opening failed); its trajectory.

        An env error (or a broken TextEnv contract) ends the episode with an error; any other
        exception stops the run.
        """
        try:
            if state.exc is None:
                state.finish_reason = await self._turns(index, state, base_seed)
                state.reusable = state.reuse_key is not None
        except Exception as exc:
            if isinstance(exc, EnvContractError) or raised_by_env(exc):
                self._fail(index, state, exc)
            else:
                raise
        if state.record is not None and self.config.check_token_exact:
            state.record.check()
        return state.to_trajectory(self._pad_id)

    async def _turns(self, index: int, state: EpisodeState, base_seed: int | None) -> str:
        """Play turns until the episode ends; returns the finish reason."""
        cfg = self.config
        record = state.record
        if record is None:  # pragma: no cover - set by the opening
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


__all__ = ["TOOL_CALL_END", "TurnsPlayer"]
