"""Play an agent function's episode through the gateway: the runner's side of ``AgentEnv``.

For each episode: open an endpoint on the runner's ``Gateway`` (the run's sampling and limits
apply, ``rlvr.agents.gateway.service.EpisodeLimits``), give the agent an ``openai.AsyncOpenAI``
client
whose requests go into the gateway's app in-process (``httpx.ASGITransport``: no socket, the
same event loop as the engine, so every agent's calls batch together), wait for its answer
(at most the env's ``timeout_s``), grade it with the env's ``step`` on an env thread, and turn
the captured calls into the episode's ``Trajectory`` (more rows in ``extra_rows`` after a prefix
break, ``rlvr.agents.gateway.capture``).

Why an agent episode ends: "stop" (the agent returned an answer and it was graded), "max_turns"
or "length" (the endpoint refused a call past the run's ``max_turns`` or
``max_response_tokens``; the rows are kept with reward 0), "error" (the agent raised, or took
longer than ``timeout_s``, or made no model call, or grading raised; not trained on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rlvr.agents.chat import ChatRenderer
from rlvr.agents.episode import EpisodeRecord, jsonable
from rlvr.agents.episode_state import EpisodeState
from rlvr.agents.errors import MissingDependencyError
from rlvr.agents.gateway.app import create_app
from rlvr.agents.gateway.http import http_client_module
from rlvr.agents.gateway.service import EpisodeLimits, Gateway
from rlvr.agents.runner_config import RunnerConfig, turn_seed
from rlvr.trajectory import EpisodeOutcome, Trajectory

logger = logging.getLogger(__name__)

#: Seeds of a call's choices are ``turn_seed(base, episode, call * SEED_STRIDE + choice)``.
SEED_STRIDE = 64
#: The model name the episode clients send (any name is accepted).
POLICY_MODEL = "policy"


class AgentPlayer:
    """Plays ``AgentEnv`` episodes for one runner (one engine, one tokenizer, one config)."""

    def __init__(self, engine: Any, tokenizer: Any, config: RunnerConfig,
                 renderer: ChatRenderer) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - the gateway extra is missing
            raise MissingDependencyError(
                "agent envs need the gateway extra: pip install 'rlvr[gateway]'") from exc
        self._httpx, self._openai = http_client_module(), openai
        self.config = config
        self.renderer = renderer
        self.gateway = Gateway(engine, tokenizer, model_name=POLICY_MODEL,
                               stop_at_tool_call=config.stop_at_tool_call,
                               sampling=config.sampling)
        self.app = create_app(self.gateway)
        self._base: Any = None
        self._base_loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> Any:
        """This event loop's client into the app.

        Episodes get copies with their own base URL (``with_options``: ~4 ms less per episode
        than a new client, measured here).
        """
        loop = asyncio.get_running_loop()
        if self._base is None or self._base_loop is not loop:
            http = self._httpx.AsyncClient(transport=self._httpx.ASGITransport(app=self.app),
                                           base_url="http://gateway")
            self._base = self._openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="rlvr",
                                                  http_client=http, max_retries=0)
            self._base_loop = loop
        return self._base

    async def play(self, index: int, state: EpisodeState, base_seed: int | None,
                   env_call: Callable[..., Awaitable[Any]], pad_id: int) -> Trajectory:
        """Play one opened episode (``state.env`` is an ``AgentEnv`` after ``reset``)."""
        cfg = self.config
        env = state.env.unwrapped
        task = env.agent_task()

        def seed(call: int, choice: int) -> int | None:
            return None if base_seed is None else turn_seed(base_seed, index,
                                                            call * SEED_STRIDE + choice)

        limits = EpisodeLimits(sampling=cfg.sampling, max_calls=cfg.max_turns,
                               max_tokens_per_call=cfg.max_tokens_per_turn,
                               max_response_tokens=cfg.max_response_tokens,
                               stop_at_tool_call=cfg.stop_at_tool_call, seed=seed)
        episode = self.gateway.open_episode(limits)
        capture = episode.capture
        client = self._client().with_options(
            base_url=f"http://gateway/episodes/{capture.key}/v1", timeout=env.timeout_s)
        answer: Any = None
        finish = "stop"
        try:
            answer = await asyncio.wait_for(env.agent(client, task), env.timeout_s)
        except asyncio.TimeoutError:
            state.fail(TimeoutError(f"the agent took longer than timeout_s={env.timeout_s}"))
        except Exception as exc:
            if capture.exhausted is not None:
                finish = capture.exhausted
            else:
                state.fail(exc)
        finally:
            self.gateway.close_episode(capture.key)
        state.turns = len(capture.calls)
        state.tool_calls_seen = sum(_tool_calls(c.message) for n in capture.calls
                                    for c in n.choices)
        reward = 0.0
        if state.exc is None and not capture.calls:
            state.fail(RuntimeError("the agent made no model call: nothing to train on"))
        if state.exc is None and finish == "stop":
            text = answer if isinstance(answer, str) else ("" if answer is None else str(answer))
            try:
                obs, reward, _, _, info = await env_call(state.env.step, text)
                state.note_step(text, obs, info)
                state.answer = jsonable(answer) if state.answer is None else state.answer
            except Exception as exc:
                state.fail(exc)
                reward = 0.0
        state.finish_reason = "error" if state.exc is not None else finish
        if state.exc is not None:
            reward = 0.0
            logger.warning("agent episode %d (env %s, task %s) ended with an error: %r",
                           index, state.env_id, state.task_id or "?", state.exc)
        return self._trajectory(state, capture, float(reward), task, pad_id)

    def _trajectory(self, state: EpisodeState, capture: Any, reward: float, task: Any,
                    pad_id: int) -> Trajectory:
        rows = capture.rows(reward)
        if not rows:
            prompt = (self.renderer.prompt_ids(task.messages, task.tools) if task.messages
                      else [pad_id])
            rows_records = [EpisodeRecord(prompt)]
        else:
            rows_records = [r.record for r in rows]
        last = capture.calls[-1] if capture.calls else None
        messages = list(last.messages or []) if last is not None else list(task.messages)
        if last is not None and last.choices and last.choices[0].message is not None:
            messages.append(last.choices[0].message)
        outcome = EpisodeOutcome(verdict=state.verdict, answer=state.answer, gold=state.gold,
                                 turns=state.turns,
                                 tool_calls=state.tool_calls_seen, tool_errors=None,
                                 error=state.error, metrics=dict(state.env_metrics))
        trajectories = []
        for k, record in enumerate(rows_records):
            metadata = {
                "n_model_tokens": record.n_model_tokens, "n_env_tokens": record.n_env_tokens,
                "reset_seed": state.spec.seed, "gateway_calls": len(capture.calls),
                "gateway_row": k, "gateway_rows": len(rows_records),
            }
            if k == 0:
                metadata["messages"] = jsonable(messages)
                metadata["gateway_prefix_breaks"] = capture.prefix_breaks
            if state.exc is not None:
                record.zero_scores()
            trajectories.append(record.to_trajectory(
                group_id=state.spec.group_id, env_id=state.env_id, task_id=state.task_id,
                finish_reason=state.finish_reason, outcome=outcome if k == 0 else
                EpisodeOutcome(turns=state.turns, error=state.error), metadata=metadata))
        main = trajectories[0]
        main.extra_rows = trajectories[1:]
        return main


def _tool_calls(message: dict[str, Any] | None) -> int:
    """Tool calls in a returned message.

    Its ``tool_calls``, else the ``<tool_call>`` tags in its text (an agent that reads the calls
    from the content), as the runner counts them.
    """
    if not message:
        return 0
    calls = message.get("tool_calls") or []
    return len(calls) if calls else str(message.get("content") or "").count("<tool_call>")
