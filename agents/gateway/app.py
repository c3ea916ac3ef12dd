"""The gateway's HTTP routes (FastAPI): ``/v1/...`` and each episode's ``/episodes/{key}/v1/...``.

Routes: ``POST /v1/chat/completions``, ``POST /v1/completions``, ``POST /v1/responses``
(``rlvr.agents.gateway.openai_responses``), ``POST /v1/messages`` (Anthropic,
``rlvr.agents.gateway.anthropic_messages``: its errors are Anthropic error objects),
``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health``; the same under
``/episodes/{key}`` for an episode's endpoint (``Gateway.open_episode``). Every other error is
an OpenAI error object: 400 for a malformed
request (naming the field), 401 for a wrong API key, 404 for an unknown route, episode or
(with ``strict_model``) model, 405 for a wrong method, 413 for a body over
``max_body_bytes``; an unexpected failure is a 500 with
``type: server_error`` (and is logged), never a bare traceback.
"""

# No ``from __future__ import annotations`` here: FastAPI reads the route functions' annotations
# (``Request``, imported inside ``create_app`` because fastapi is optional) at definition time.
import asyncio
import json
import logging
from collections.abc import Awaitable
from typing import Any, NamedTuple, TypeVar

from rlvr.agents.errors import MissingDependencyError
from rlvr.agents.gateway.anthropic_messages import (
    error_body,
    message_events,
    message_object,
    parse_messages,
)
from rlvr.agents.gateway.openai_responses import (
    parse_responses,
    response_events,
    response_object,
)
from rlvr.agents.gateway.protocol import GatewayHTTPError, parse_chat, parse_completion
from rlvr.agents.gateway.responses import (
    chat_chunks,
    chat_response,
    completion_chunks,
    completion_response,
)
from rlvr.agents.gateway.service import Gateway

logger = logging.getLogger(__name__)

T = TypeVar("T")


async def unless_disconnected(request: Any, work: Awaitable[T]) -> T:
    """Await ``work``, cancelling it (and so its generation) when the client disconnects.

    The engine drops a cancelled request from its batch at once, so an abandoned call stops
    taking decode steps from everyone else. The body has been read, so the next ASGI message is
    ``http.disconnect``, which arrives when the client goes away (or, in-process, when the
    response is complete).
    """
    task = asyncio.ensure_future(work)

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message.get("type") == "http.disconnect":
                return

    watcher = asyncio.ensure_future(watch())
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        logger.info("client disconnected: generation cancelled")
        raise GatewayHTTPError(499, "the client disconnected", code="client_disconnected")
    return task.result()


class _Web(NamedTuple):
    """The web framework's names (fastapi is optional: imported when an app is made)."""

    FastAPI: Any
    RequestValidationError: Any
    HTTPException: Any
    JSONResponse: Any
    StreamingResponse: Any


def _web() -> _Web:
    try:
        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, StreamingResponse
        from starlette.exceptions import HTTPException
    except ImportError as exc:  # pragma: no cover - the gateway extra is missing
        raise MissingDependencyError(
            "the gateway needs fastapi and uvicorn: pip install 'rlvr[gateway]'") from exc
    return _Web(FastAPI, RequestValidationError, HTTPException, JSONResponse,
                StreamingResponse)


def create_app(gateway: Gateway) -> Any:
    """The FastAPI application serving ``gateway``.

    Raises:
        MissingDependencyError: fastapi is not installed (``pip install 'rlvr[gateway]'``).
    """
    web = _web()
    app = web.FastAPI(title="rlvr gateway", docs_url=None, redoc_url=None, openapi_url=None)
    _add_error_handlers(app, web)
    _add_routes(app, _Api(gateway, web), web)
    return app


def _add_error_handlers(app: Any, web: _Web) -> None:
    """Every error leaves as an OpenAI error object (Anthropic's route answers its own)."""
    from fastapi import Request  # read by the annotations below, at definition time

    def error(exc: GatewayHTTPError) -> Any:
        return web.JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(GatewayHTTPError)
    async def _gateway_error(_: Request, exc: GatewayHTTPError) -> Any:
        return error(exc)

    @app.exception_handler(web.HTTPException)
    async def _http_error(_: Request, exc: Any) -> Any:
        return error(GatewayHTTPError(exc.status_code, str(exc.detail),
                                      code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(web.RequestValidationError)
    async def _validation_error(_: Request, exc: Any) -> Any:
        return error(GatewayHTTPError(400, f"malformed request: {exc.errors()}"))

    @app.exception_handler(Exception)
    async def _server_error(_: Request, exc: Exception) -> Any:
        logger.exception("gateway request failed")
        return error(GatewayHTTPError(500, f"internal error: {type(exc).__name__}: {exc}",
                                      kind="server_error"))


class _Api:
    """What each route does.

    ``key`` is None on the shared ``/v1/...`` routes and the episode's key on
    ``/episodes/{key}/v1/...``, where the episode is looked up first (an unknown one is a 404).
    """

    def __init__(self, gateway: Gateway, web: _Web) -> None:
        self.gateway = gateway
        self.web = web

    def episode(self, key: str | None) -> Any:
        return None if key is None else self.gateway.episode(key)

    def authorize(self, request: Any) -> None:
        api_key = self.gateway.api_key
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        if header != f"Bearer {api_key}" and request.headers.get("x-api-key") != api_key:
            raise GatewayHTTPError(401, "invalid API key (send 'Authorization: Bearer <key>' "
                                   "or 'x-api-key: <key>')",
                                   kind="authentication_error", code="invalid_api_key")

    async def body_of(self, request: Any) -> Any:
        limit = self.gateway.max_body_bytes
        too_big = GatewayHTTPError(413, f"the request body is over {limit} bytes",
                                   code="request_too_large")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_big
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise too_big
        try:
            return json.loads(bytes(raw))
        except RecursionError:
            raise GatewayHTTPError(400, "the request body's JSON is nested too deeply") from None
        except ValueError as exc:
            raise GatewayHTTPError(400, f"the request body is not valid JSON: {exc}") from exc

    def respond(self, payload: Any, chunks: Any) -> Any:
        if chunks is not None:
            return self.web.StreamingResponse(chunks, media_type="text/event-stream")
        return self.web.JSONResponse(payload)

    async def chat(self, request: Any, key: str | None) -> Any:
        episode = self.episode(key)
        self.authorize(request)
        req = parse_chat(await self.body_of(request))
        out = await unless_disconnected(request, self.gateway.chat(req, episode))
        templates = self.gateway.templates
        if req.sampling.stream:
            return self.respond(None, chat_chunks(req, out, templates))
        return self.respond(chat_response(req, out, templates), None)

    async def complete(self, request: Any, key: str | None) -> Any:
        episode = self.episode(key)
        self.authorize(request)
        req = parse_completion(await self.body_of(request))
        out = await unless_disconnected(request, self.gateway.complete(req, episode))
        templates = self.gateway.templates
        if req.sampling.stream:
            return self.respond(None, completion_chunks(req, out, templates))
        return self.respond(completion_response(req, out, templates), None)

    async def responses(self, request: Any, key: str | None) -> Any:
        episode = self.episode(key)
        self.authorize(request)
        req, echo = parse_responses(await self.body_of(request))
        out = await unless_disconnected(request, self.gateway.chat(req, episode))
        templates = self.gateway.templates
        if req.sampling.stream:
            return self.respond(None, response_events(req, echo, out, templates))
        return self.respond(response_object(req, echo, out, templates), None)

    async def messages(self, request: Any, key: str | None) -> Any:
        try:  # Anthropic clients read Anthropic error objects, an unknown episode's included
            episode = self.episode(key)
            self.authorize(request)
            req = parse_messages(await self.body_of(request))
            out = await unless_disconnected(request, self.gateway.chat(req, episode))
        except GatewayHTTPError as exc:
            return self.web.JSONResponse(error_body(exc), status_code=exc.status)
        templates = self.gateway.templates
        if req.sampling.stream:
            return self.respond(None, message_events(req, out, templates))
        return self.respond(message_object(req, out, templates), None)

    def model_card(self) -> dict[str, Any]:
        gateway = self.gateway
        return {"id": gateway.model_name, "object": "model", "created": gateway.created,
                "owned_by": "rlvr", "max_model_len": gateway.max_context}

    async def models(self, request: Any, key: str | None) -> Any:
        self.episode(key)
        self.authorize(request)
        return self.web.JSONResponse({"object": "list", "data": [self.model_card()]})

    def model(self, request: Any, name: str) -> Any:
        self.authorize(request)
        if name != self.gateway.model_name:
            raise GatewayHTTPError(404, f"the model {name!r} does not exist; this server serves "
                                   f"{self.gateway.model_name!r}", param="model",
                                   code="model_not_found")
        return self.web.JSONResponse(self.model_card())


def _add_routes(app: Any, api: _Api, web: _Web) -> None:
    """Each ``/v1/...`` route, and the same under ``/episodes/{key}``."""
    from fastapi import Request  # read by the annotations below, at definition time

    def shared(handler: Any) -> Any:
        async def endpoint(request: Request) -> Any:
            return await handler(request, None)
        return endpoint

    def of_episode(handler: Any) -> Any:
        async def endpoint(key: str, request: Request) -> Any:
            return await handler(request, key)
        return endpoint

    async def health() -> Any:
        return web.JSONResponse({"status": "ok"})

    async def model(name: str, request: Request) -> Any:
        return api.model(request, name)

    app.add_api_route("/health", health, methods=["GET"])
    app.add_api_route("/v1/models/{name:path}", model, methods=["GET"])
    routes = (("chat/completions", "POST", api.chat), ("completions", "POST", api.complete),
              ("responses", "POST", api.responses), ("messages", "POST", api.messages),
              ("models", "GET", api.models))
    for path, method, handler in routes:
        app.add_api_route(f"/v1/{path}", shared(handler), methods=[method])
        app.add_api_route(f"/episodes/{{key}}/v1/{path}", of_episode(handler), methods=[method])
