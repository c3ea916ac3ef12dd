"""OpenEnv's wire protocol, spoken by rlvr itself: one WebSocket session per env.

An OpenEnv environment server (``openenv-core``, 0.3.0 is tested) serves each environment
instance over a WebSocket at ``/ws``: the client sends ``{"type": "reset", "data": {...}}`` or
``{"type": "step", "data": <the action's fields>}`` and gets back
``{"type": "observation", "data": {"observation": {...}, "reward": float | None, "done":
bool}}``, or ``{"type": "error", "data": {"message": ...}}``; ``{"type": "close"}`` ends the
session. The server's ``POST /reset`` and ``POST /step`` build a fresh environment per request
(no episode survives between them), so episodes are played over the WebSocket only. ``GET
/schema`` gives the action's and the observation's JSON schemas, ``GET /health`` says it is up.

rlvr needs no ``openenv-core`` for this (only ``websockets``): openenv-core pins ``gradio``,
``fastmcp`` and ``openai`` versions that need not agree with a training venv's, so its servers
run in a venv of their own and rlvr talks to them over the wire.

Every failure is an :class:`OpenEnvError` (the server's own error message, a reply that is not
the protocol's, a dropped connection) or a ``TimeoutError`` (no reply within ``timeout_s``):
the episode runner ends such an episode with reason ``"error"`` (``"timeout"``) and does not
train on it.
"""

from __future__ import annotations

import importlib
import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from rlvr.envs.errors import EnvError, MissingDependencyError

INSTALL_HINT = "rlvr/OpenEnv-v0 needs the websockets package: pip install 'rlvr[openenv]'"
#: Largest reply accepted from a server (bytes).
MAX_MESSAGE_BYTES = 16 * 2**20


class OpenEnvError(EnvError, RuntimeError):
    """The OpenEnv server answered with an error, broke the protocol, or could not be reached."""


@dataclass(frozen=True)
class OpenEnvResult:
    """One reply to ``reset`` or ``step``.

    Attributes:
        observation: the observation's own fields (OpenEnv leaves ``reward``, ``done`` and
            ``metadata`` out of it).
        reward: the step's reward (None when the server gave none).
        done: whether the environment ended the episode.
    """

    observation: dict[str, Any]
    reward: float | None
    done: bool


def parse_result(reply: Any) -> OpenEnvResult:
    """The :class:`OpenEnvResult` in a decoded server reply, or :class:`OpenEnvError`."""
    if not isinstance(reply, dict):
        raise OpenEnvError(f"the server's reply is not a JSON object: {str(reply)[:200]}")
    data = reply.get("data")
    if reply.get("type") == "error":
        message = data.get("message") if isinstance(data, dict) else data
        raise OpenEnvError(f"the OpenEnv server reported an error: {str(message)[:500]}")
    if reply.get("type") != "observation" or not isinstance(data, dict):
        raise OpenEnvError(f"expected an observation reply, got: {json.dumps(reply)[:200]}")
    observation, reward, done = data.get("observation"), data.get("reward"), data.get("done")
    if not isinstance(observation, dict):
        raise OpenEnvError(f"the reply's observation is not an object: {observation!r:.200}")
    if not isinstance(done, bool):
        raise OpenEnvError(f"the reply's done is not a boolean: {done!r:.100}")
    if reward is not None:
        if isinstance(reward, bool) or not isinstance(reward, int | float) \
                or not math.isfinite(reward):
            raise OpenEnvError(f"the reply's reward is not a finite number: {reward!r:.100}")
        reward = float(reward)
    return OpenEnvResult(observation=observation, reward=reward, done=done)


def ws_url(url: str) -> str:
    """The session endpoint of the server at ``url`` (``http://h:p`` -> ``ws://h:p/ws``)."""
    base = url.rstrip("/")
    if base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    return base if base.endswith("/ws") else base + "/ws"


def http_base(url: str) -> str:
    """The server's HTTP root (``ws://h:p/ws`` or ``http://h:p/`` -> ``http://h:p``)."""
    base = url.rstrip("/")
    base = base.removesuffix("/ws")
    if base.startswith("wss://"):
        return "https://" + base[len("wss://"):]
    if base.startswith("ws://"):
        return "http://" + base[len("ws://"):]
    return base


def get_json(url: str, timeout_s: float) -> Any:
    """GET ``url`` and decode its JSON body (:class:`OpenEnvError` on any failure)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:  # noqa: S310
            return json.loads(response.read())
    except (OSError, ValueError, urllib.error.URLError) as exc:
        raise OpenEnvError(f"GET {url} failed: {type(exc).__name__}: {exc}") from exc


def fetch_schema(url: str, timeout_s: float) -> dict[str, Any]:
    """The server's ``/schema``: ``{"action": ..., "observation": ..., "state": ...}``."""
    schema = get_json(http_base(url) + "/schema", timeout_s)
    if not isinstance(schema, dict) or not isinstance(schema.get("action"), dict) \
            or not isinstance(schema.get("observation"), dict):
        raise OpenEnvError(f"{http_base(url)}/schema did not return the action and observation "
                           f"schemas: {str(schema)[:200]}")
    return schema


class OpenEnvSession:
    """One WebSocket session with an OpenEnv server: one environment instance on the server.

    Args:
        url: the server (``http://127.0.0.1:8000``; ``ws://.../ws`` works too).
        timeout_s: seconds to wait for the connection and for each reply.
    """

    def __init__(self, url: str, timeout_s: float) -> None:
        try:
            client = importlib.import_module("websockets.sync.client")
            self._closed_errors: tuple[type[BaseException], ...] = (
                importlib.import_module("websockets.exceptions").WebSocketException, OSError)
        except ImportError as exc:
            raise MissingDependencyError(INSTALL_HINT) from exc
        self.url = ws_url(url)
        self.timeout_s = timeout_s
        try:
            self._ws = client.connect(self.url, open_timeout=timeout_s, close_timeout=2,
                                      max_size=MAX_MESSAGE_BYTES, proxy=None)
        except self._closed_errors as exc:
            raise OpenEnvError(f"cannot open an OpenEnv session at {self.url}: "
                               f"{type(exc).__name__}: {exc}") from exc

    def reset(self, **data: Any) -> OpenEnvResult:
        """Start an episode; ``data`` goes to the environment's ``reset`` (seed, its kwargs)."""
        return parse_result(self._call({"type": "reset", "data": data}))

    def step(self, action: dict[str, Any]) -> OpenEnvResult:
        """Play ``action`` (the action model's fields)."""
        return parse_result(self._call({"type": "step", "data": action}))

    def _call(self, message: dict[str, Any]) -> Any:
        try:
            self._ws.send(json.dumps(message))
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            raise TimeoutError(f"the OpenEnv server at {self.url} did not answer a "
                               f"{message['type']} within {self.timeout_s} s") from None
        except self._closed_errors as exc:
            raise OpenEnvError(f"the OpenEnv session at {self.url} broke during a "
                               f"{message['type']}: {type(exc).__name__}: {exc}") from exc
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise OpenEnvError(f"the server's reply is not JSON: {str(raw)[:200]}") from exc

    def close(self) -> None:
        """Say goodbye and close the connection (never raises)."""
        try:
            self._ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001,S110 - the session may be gone already
            pass
        try:
            self._ws.close()
        except Exception:  # noqa: BLE001,S110
            pass
