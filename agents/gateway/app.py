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
from typing import Any, TypeVar

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


def create_app(gateway: Gateway) -> Any:
    """The FastAPI application serving ``gateway``.

    Raises:
        MissingDependencyError: fastapi is not installed (``pip install 'rlvr[gateway]'``).
    """
    try:
        from fastapi import FastAPI, Request
        from fastapi.exceptions import RequestValidationError
        from fastapi.responses import JSONResponse, StreamingResponse
        from starlette.exceptions import HTTPException
    except ImportError as exc:  # pragma: no cover - the gateway extra is missing
        raise MissingDependencyError(
            "the gateway needs fastapi and uvicorn: pip install 'rlvr[gateway]'") from exc

    app = FastAPI(title="rlvr gateway", docs_url=None, redoc_url=None, openapi_url=None)

    def error(exc: GatewayHTTPError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(GatewayHTTPError)
    async def _gateway_error(_: Request, exc: GatewayHTTPError) -> JSONResponse:
        return error(exc)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return error(GatewayHTTPError(exc.status_code, str(exc.detail),
                                      code="not_found" if exc.status_code == 404 else None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return error(GatewayHTTPError(400, f"malformed request: {exc.errors()}"))

    @app.exception_handler(Exception)
    async def _server_error(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("gateway request failed")
        return error(GatewayHTTPError(500, f"internal error: {type(exc).__name__}: {exc}",
                                      kind="server_error"))

    def authorize(request: Request) -> None:
        if gateway.api_key is None:
            return
        header = request.headers.get("authorization", "")
        if header != f"Bearer {gateway.api_key}" and request.headers.get(
                "x-api-key") != gateway.api_key:
            raise GatewayHTTPError(401, "invalid API key (send 'Authorization: Bearer <key>' "
                                   "or 'x-api-key: <key>')",
                                   kind="authentication_error", code="invalid_api_key")

    async def body_of(request: Request) -> Any:
        limit = gateway.max_body_bytes
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

    def respond(payload: Any, chunks: Any) -> Any:
        if chunks is not None:
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(payload)

    async def chat(request: Request, episode: Any) -> Any:
        authorize(request)
        req = parse_chat(await body_of(request))
        out = await unless_disconnected(request, gateway.chat(req, episode))
        if req.sampling.stream:
            return respond(None, chat_chunks(req, out, gateway.templates))
        return respond(chat_response(req, out, gateway.templates), None)

    async def complete(request: Request, episode: Any) -> Any:
        authorize(request)
        req = parse_completion(await body_of(request))
        out = await unless_disconnected(request, gateway.complete(req, episode))
        if req.sampling.stream:
            return respond(None, completion_chunks(req, out, gateway.templates))
        return respond(completion_response(req, out, gateway.templates), None)

    async def responses(request: Request, episode: Any) -> Any:
        authorize(request)
        req, echo = parse_responses(await body_of(request))
        out = await unless_disconnected(request, gateway.chat(req, episode))
        if req.sampling.stream:
            return respond(None, response_events(req, echo, out, gateway.templates))
        return respond(response_object(req, echo, out, gateway.templates), None)

    async def messages(request: Request, episode: Any) -> Any:
        try:
            authorize(request)
            req = parse_messages(await body_of(request))
            out = await unless_disconnected(request, gateway.chat(req, episode))
        except GatewayHTTPError as exc:  # Anthropic clients read Anthropic error objects
            return JSONResponse(error_body(exc), status_code=exc.status)
        if req.sampling.stream:
            return respond(None, message_events(req, out, gateway.templates))
        return respond(message_object(req, out, gateway.templates), None)

    def model_card() -> dict[str, Any]:
        return {"id": gateway.model_name, "object": "model", "created": gateway.created,
                "owned_by": "rlvr", "max_model_len": gateway.max_context}

    def models(request: Request) -> Any:
        authorize(request)
        return JSONResponse({"object": "list", "data": [model_card()]})

    def model(request: Request, name: str) -> Any:
        authorize(request)
        if name != gateway.model_name:
            raise GatewayHTTPError(404, f"the model {name!r} does not exist; this server serves "
                                   f"{gateway.model_name!r}", param="model",
                                   code="model_not_found")
        return JSONResponse(model_card())

    @app.get("/health")
    async def _health() -> Any:
        return JSONResponse({"status": "ok"})

    @app.get("/v1/models/{name:path}")
    async def _model(name: str, request: Request) -> Any:
        return model(request, name)

    @app.post("/v1/chat/completions")
    async def _chat(request: Request) -> Any:
        return await chat(request, None)

    @app.post("/v1/completions")
    async def _complete(request: Request) -> Any:
        return await complete(request, None)

    @app.post("/v1/responses")
    async def _responses(request: Request) -> Any:
        return await responses(request, None)

    @app.post("/v1/messages")
    async def _messages(request: Request) -> Any:
        return await messages(request, None)

    @app.get("/v1/models")
    async def _models(request: Request) -> Any:
        return models(request)

    @app.post("/episodes/{key}/v1/chat/completions")
    async def _episode_chat(key: str, request: Request) -> Any:
        return await chat(request, gateway.episode(key))

    @app.post("/episodes/{key}/v1/completions")
    async def _episode_complete(key: str, request: Request) -> Any:
        return await complete(request, gateway.episode(key))

    @app.post("/episodes/{key}/v1/responses")
    async def _episode_responses(key: str, request: Request) -> Any:
        return await responses(request, gateway.episode(key))

    @app.post("/episodes/{key}/v1/messages")
    async def _episode_messages(key: str, request: Request) -> Any:
        try:
            episode = gateway.episode(key)
        except GatewayHTTPError as exc:
            return JSONResponse(error_body(exc), status_code=exc.status)
        return await messages(request, episode)

    @app.get("/episodes/{key}/v1/models")
    async def _episode_models(key: str, request: Request) -> Any:
        gateway.episode(key)
        return models(request)

    return app
