"""An OpenAI-compatible gateway in front of any rlvr engine, token-exact per episode.

``Gateway`` (``rlvr.agents.gateway.service``) serves ``/v1/chat/completions``, ``/v1/completions``
and
``/v1/models`` (``create_app`` builds the FastAPI app) on any ``rlvr.agents.engine.Engine``. Each
episode gets its own endpoint (``/episodes/{key}/v1``) whose calls are kept token-exact
(``rlvr.agents.gateway.capture``) and become ``rlvr.batch.Trajectory`` rows;
``rlvr.agents.gateway.agent``
plays agent functions (``rlvr.envs.agent_env.AgentEnv``) through it for the episode runner.
Needs the ``gateway`` extra (fastapi, uvicorn, openai).
"""

from __future__ import annotations

from rlvr.agents.gateway.app import create_app
from rlvr.agents.gateway.capture import EpisodeCapture
from rlvr.agents.gateway.protocol import GatewayHTTPError
from rlvr.agents.gateway.service import EpisodeLimits, Gateway

__all__ = ["EpisodeCapture", "EpisodeLimits", "Gateway", "GatewayHTTPError", "create_app"]
