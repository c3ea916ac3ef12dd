"""rlvr/OpenEnv-v0: an OpenEnv environment server played as a TextEnv.

OpenEnv (``openenv-core``; 0.3.0 is tested) serves gymnasium-style ``reset``/``step``
environments over HTTP and WebSocket, each with its own typed action and observation. This env
connects to a running server (``url``) or starts one as a local process (``command``, with
``{port}`` where the port goes; ``rlvr.envs.openenv_server``) and plays one WebSocket session
per env instance (``rlvr.envs.openenv_client``)::

    env = rlvr.envs.make("rlvr/OpenEnv-v0", command="python server.py --port {port}")

The mapping onto the TextEnv contract:

* the model's text goes into one string field of the action (``action_field``; by default the
  one required string field of the server's action schema);
* an observation is shown as one string field (``observation_field``; by default the
  observation schema's one string field), as a ``user`` message: the opening one after an
  optional ``system_prompt``, then one per step that does not end the episode;
* ``reset(seed)`` sends ``seed``, ``split`` and ``reset_kwargs`` to the server's ``reset``
  (``options={"task_index": i}`` is seed ``i``); ``info["task_id"]`` is ``"<split>/<seed>"``;
* a step's reward is the server's (None counts 0; it must lie in [0, 1]); ``done`` terminates
  the episode with a ``Verdict`` whose score is the last reward (passed at ``pass_threshold``);
  ``max_turns`` steps without ``done`` truncate it.

Fails closed: a server that reports an error, breaks the protocol, sends an observation
without the expected text field, a reward outside [0, 1], or a reset that is already done,
raises :class:`~rlvr.envs.openenv_client.OpenEnvError` out of ``reset``/``step`` (a reply slower
than ``timeout_s`` raises ``TimeoutError``): the episode runner ends that episode with reason
``"error"`` (``"timeout"``) and never trains on it. The session is then reopened at the next
``reset``. What the model writes never raises: text is sent as it is (unpaired surrogates
replaced), and the server grades it.

``reference_field`` names an observation field with the task's reference answer: it is never
shown to the model, but the supervised warm-up (``demonstration``) and ``rlvr check-env``'s
probes (``task["answer"]``) use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlvr.envs.base import Message, TextEnv
from rlvr.envs.errors import EnvArgumentError, EpisodeOverError, ResetNeededError
from rlvr.envs.openenv_client import OpenEnvError, OpenEnvResult, OpenEnvSession, fetch_schema
from rlvr.envs.openenv_server import LocalServer, acquire, release
from rlvr.envs.spaces import ChatMessages, FreeText
from rlvr.verifiers import Verdict

SPLITS = ("train", "test")
_SCHEMA_SKIP = ("metadata", "reward", "done")


def string_field(schema: Mapping[str, Any], what: str, key: str,
                 exclude: tuple[str | None, ...] = ()) -> str:
    """The one (required, for an action) string property of ``schema``, else an error."""
    skip = (*_SCHEMA_SKIP, *exclude)
    props = {k: v for k, v in (schema.get("properties") or {}).items() if k not in skip}
    names = [k for k, v in props.items() if isinstance(v, dict) and v.get("type") == "string"]
    if what == "action":
        required = set(schema.get("required") or ())
        names = [k for k in names if k in required] or names
    if len(names) != 1:
        raise EnvArgumentError(
            f"{key}: the server's {what} has string fields {names} (of {sorted(props)}); name "
            f"the one that holds the text with {key}")
    return names[0]


def _check_field(schema: Mapping[str, Any], field: str, what: str, key: str) -> None:
    props = schema.get("properties") or {}
    if field not in props:
        raise EnvArgumentError(f"{key}: the server's {what} has no field {field!r}; its fields: "
                               f"{sorted(k for k in props if k not in _SCHEMA_SKIP)}")


class OpenEnvEnv(TextEnv):
    """An OpenEnv server's environment over chat messages (see the module docstring).

    Args:
        url: a running server (``http://127.0.0.1:8000``); exclusive with ``command``.
        command: a command line that starts a server on ``{port}`` (127.0.0.1).
        action_field: the action's string field the model's text goes into.
        observation_field: the observation's string field shown to the model.
        reference_field: an observation field with the reference answer (never shown).
        system_prompt: a system message opening each episode (None: none).
        split: ``"train"`` or ``"test"``, sent to the server's ``reset`` as ``split``.
        reset_kwargs: more keyword arguments for the server's ``reset``.
        max_turns: steps without ``done`` before the episode is truncated.
        pass_threshold: the final reward at which the verdict passes.
        timeout_s: seconds to wait for each server reply.
        start_timeout_s: seconds a ``command`` server may take to come up.
    """

    reward_range = (0.0, 1.0)

    def __init__(self, url: str | None = None, command: str | None = None, *,
                 action_field: str | None = None, observation_field: str | None = None,
                 reference_field: str | None = None, system_prompt: str | None = None,
                 split: str = "train", reset_kwargs: Mapping[str, Any] | None = None,
                 max_turns: int = 8, pass_threshold: float = 1.0, timeout_s: float = 30.0,
                 start_timeout_s: float = 120.0) -> None:
        if (url is None) == (command is None):
            raise EnvArgumentError("rlvr/OpenEnv-v0 takes exactly one of url (a running "
                                   "OpenEnv server) and command (a line that starts one)")
        if split not in SPLITS:
            raise EnvArgumentError(f"split must be one of {SPLITS}, got {split!r}")
        if max_turns < 1 or timeout_s <= 0 or start_timeout_s <= 0:
            raise EnvArgumentError("max_turns must be >= 1, timeout_s and start_timeout_s > 0")
        if not 0.0 < pass_threshold <= 1.0:
            raise EnvArgumentError(f"pass_threshold must lie in (0, 1], got {pass_threshold}")
        self.split, self.max_turns, self.timeout_s = split, max_turns, timeout_s
        self.system_prompt, self.pass_threshold = system_prompt, pass_threshold
        self.reset_kwargs = dict(reset_kwargs or {})
        self._server: LocalServer | None = None
        self._session: OpenEnvSession | None = None
        if command is not None:
            self._server = acquire(command, start_timeout_s)
            url = self._server.url
        self.url = str(url)
        try:
            schema = fetch_schema(self.url, timeout_s)
            self.action_field = action_field or string_field(schema["action"], "action",
                                                             "action_field")
            _check_field(schema["action"], self.action_field, "action", "action_field")
            self.observation_field = observation_field or string_field(
                schema["observation"], "observation", "observation_field", (reference_field,))
            _check_field(schema["observation"], self.observation_field, "observation",
                         "observation_field")
            if reference_field is not None:
                _check_field(schema["observation"], reference_field, "observation",
                             "reference_field")
        except BaseException:
            self.close()
            raise
        self.reference_field = reference_field
        self.action_space = FreeText()
        self.observation_space = ChatMessages()
        self._reference: str | None = None
        self._turns = 0
        self._ended: bool | None = None

    @property
    def task(self) -> dict[str, Any] | None:
        """The current task's reference as ``{"answer": ...}`` (None without a reference)."""
        return None if self._reference is None else {"answer": self._reference}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[list[Message], dict[str, Any]]:
        """Open an episode: the server's first observation as a user message."""
        super().reset(seed=seed)
        options = options or {}
        if "task_index" in options:
            task_seed = int(options["task_index"])
        elif "task_id" in options:
            task_seed = int(str(options["task_id"]).rsplit("/", 1)[-1])
        elif seed is not None:
            task_seed = seed
        else:
            task_seed = int(self.np_random.integers(2**31))
        self._ended = None
        result = self._exchange(lambda s: s.reset(seed=task_seed, split=self.split,
                                                  **self.reset_kwargs))
        if result.done:
            self._drop_session()
            raise OpenEnvError(f"the OpenEnv server ended the episode at reset (seed {task_seed})")
        messages: list[Message] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        messages.append({"role": "user", "content": self._text(result)})
        self._turns, self._ended = 0, False
        return messages, {"task_id": f"{self.split}/{task_seed}"}

    def step(self, action: str) -> tuple[list[Message], float, bool, bool, dict[str, Any]]:
        """Send the model's text as the action's field; map the reply (module docstring)."""
        if self._ended is None:
            raise ResetNeededError("call reset() before step()")
        if self._ended:
            raise EpisodeOverError("the episode is over; call reset()")
        text = str(action).encode("utf-8", "replace").decode("utf-8")
        result = self._exchange(lambda s: s.step({self.action_field: text}))
        reward = 0.0 if result.reward is None else result.reward
        if not 0.0 <= reward <= 1.0:
            self._ended = True
            self._drop_session()
            raise OpenEnvError(f"the OpenEnv server gave reward {reward}, outside [0, 1] "
                               "(rlvr/OpenEnv-v0 trains on rewards in [0, 1])")
        self._turns += 1
        info: dict[str, Any] = {}
        if result.done:
            self._ended = True
            passed = reward >= self.pass_threshold
            info["verdict"] = Verdict(reward, passed, "correct" if passed else "wrong_answer",
                                      {"reward": reward, "turns": self._turns})
            return [], reward, True, False, info
        if self._turns >= self.max_turns:
            self._ended = True
            return [], reward, False, True, info
        return [{"role": "user", "content": self._text(result)}], reward, False, False, info

    def _exchange(self, call: Callable[[OpenEnvSession], OpenEnvResult]) -> OpenEnvResult:
        """One request on the session (opened if needed); a failure drops the session."""
        try:
            if self._session is None:
                self._session = OpenEnvSession(self.url, self.timeout_s)
            return call(self._session)
        except BaseException:
            self._ended = True
            self._drop_session()
            raise

    def _text(self, result: OpenEnvResult) -> str:
        """The observation's text field (and note its reference), or OpenEnvError."""
        text = result.observation.get(self.observation_field)
        if not isinstance(text, str):
            self._ended = True
            self._drop_session()
            raise OpenEnvError(f"the observation's {self.observation_field!r} is not a string: "
                               f"{text!r:.200} (observation fields: {sorted(result.observation)})")
        if self.reference_field is not None:
            ref = result.observation.get(self.reference_field)
            self._reference = None if ref is None else str(ref)
        return text

    def demonstration(self, tool_results: Sequence[Message], *,
                      use_tool: bool = True) -> str | None:
        """The reference answer of the current task (``reference_field``), else None."""
        return self._reference

    def _drop_session(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def close(self) -> None:
        """Close the session; the last env of a ``command`` server stops it."""
        self._drop_session()
        if self._server is not None:
            server, self._server = self._server, None
            release(server)
