"""The gateway's HTTP server (FastAPI): sessions, OpenAI and Anthropic endpoints, records.

Endpoints (docs/architecture.md, "Gateway HTTP API"):

- `POST /sessions` -> `{session_id, api_key, openai_base_url, anthropic_base_url}`
- `POST /sessions/<id>/v1/chat/completions` (OpenAI, `stream` as SSE), `GET .../v1/models`
- `POST /sessions/<id>/v1/responses` (OpenAI Responses, `stream` as SSE; `previous_response_id`
  names one of the session's newest stored responses)
- `POST /sessions/<id>/v1/messages` (Anthropic, `stream` as SSE; as Claude Code and the SDK's
  `beta.messages` send it, `?beta=true` and `anthropic-beta` included; the adapter's docstring
  lists which fields are honoured, ignored and counted, or refused), and
  `POST .../v1/messages/count_tokens` -> `{"input_tokens": N}`, N the prompt tokens the next
  such request would send the engine (`GatewaySession.count_prompt_tokens`)
- `GET /sessions/<id>/trajectories`, `GET /sessions/<id>/calls`, `POST /sessions/<id>/finalize`,
  `DELETE /sessions/<id>`
- `GET /health` (`{"status": "ok"}`), `GET /metrics` (Prometheus text)

Two planes (docs/architecture.md, "Gateway planes"). The model endpoints under
`/sessions/<id>/v1/` need that session's key (`Authorization: Bearer` or `x-api-key`); a wrong
key and an unknown id get the same 401. Creating, reading (`trajectories`, `calls`), finalizing
and deleting sessions, and `/metrics`, need the gateway's control key
(`SessionManager.control_key`), which no agent holds: a session key there is a 401. `/health`
says only that the server is up; FastAPI's `/docs`, `/redoc` and `/openapi.json` are not
served. Every error
is answered in the envelope of the protocol the client speaks, and a rejected request never
touches the session's chains. A generation ends, committing nothing, when its client
disconnects (streaming or not), when its session is deleted or finalized (409), and when the
server shuts down; a prompt over the chain's capacity is each provider's context-length 400.
Fields a request carried that the gateway accepted and ignored are counted per protocol and
field in `/metrics` (`agent_rl_gateway_ignored_request_fields_total`).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response, StreamingResponse
from starlette.types import Receive

from uni_agent_core.errors import AgentRLError
from uni_agent_core.gateway.adapters.anthropic import (
    anthropic_error,
    parse_anthropic_count_tokens,
    parse_anthropic_request,
)
from uni_agent_core.gateway.adapters.anthropic_render import (
    AnthropicEventStream,
    anthropic_response,
    anthropic_sse_event,
    invalid_tool_inputs,
)
from uni_agent_core.gateway.adapters.errors import WireError
from uni_agent_core.gateway.adapters.openai import (
    openai_error,
    openai_include_usage,
    parse_openai_request,
)
from uni_agent_core.gateway.adapters.openai_render import (
    SSE_DONE,
    OpenAIChunkStream,
    openai_response,
    sse_event,
)
from uni_agent_core.gateway.adapters.responses import parse_responses_request, remember_response
from uni_agent_core.gateway.adapters.responses_render import (
    ResponseHeader,
    ResponsesEventStream,
    reply_message,
    responses_response,
    responses_sse_event,
)
from uni_agent_core.gateway.heap import IdleHeapTrimmer
from uni_agent_core.gateway.manager import SessionLimitError, SessionManager, SessionNotFoundError
from uni_agent_core.gateway.request import ChatChoice, ChatRequest, StreamDelta
from uni_agent_core.gateway.session import (
    ContextLengthError,
    GatewaySession,
    RequestRejectedError,
    SessionClosedError,
)

T = TypeVar("T")
ErrorRenderer = Callable[[int, str, str | None, str | None], tuple[int, dict[str, Any]]]
"""(status, message, param, code) -> the protocol's (status, body)."""

CLIENT_CLOSED_REQUEST = 499
"""The status logged for a request whose client left before the answer (never received)."""


def _openai_envelope(
    status: int, message: str, param: str | None, code: str | None = None
) -> tuple[int, dict[str, Any]]:
    return openai_error(status, message, param=param, code=code)


def _anthropic_envelope(
    status: int, message: str, param: str | None, code: str | None = None
) -> tuple[int, dict[str, Any]]:
    if code is not None:  # a provider-level condition: its own message, no field prefix
        return anthropic_error(status, message)
    return anthropic_error(status, f"{param}: {message}" if param else message)


def error_body(render: ErrorRenderer, exc: Exception) -> tuple[int, dict[str, Any]]:
    """The status and protocol envelope of a failed request (also sent inside a stream)."""
    if isinstance(exc, (_Rejected, WireError)):
        return render(exc.status, exc.message, exc.param, None)
    if isinstance(exc, ContextLengthError):
        return render(400, str(exc), exc.param, exc.code)
    if isinstance(exc, RequestRejectedError):
        return render(400, str(exc), exc.param, None)
    if isinstance(exc, SessionClosedError):
        return render(409, str(exc), None, None)
    return render(500, f"generation failed: {type(exc).__name__}: {exc}", None, None)


class ClientDisconnectedError(AgentRLError):
    """The client closed the connection before its answer was ready."""


async def _client_disconnects(receive: Receive) -> None:
    """Returns once the ASGI server reports that the client went away.

    Only for a request whose body has been read: its `receive` then yields nothing but the
    disconnect.
    """
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(work: Awaitable[T], receive: Receive) -> T:
    """Awaits `work`, cancelling it when the client disconnects first.

    Raises:
        ClientDisconnectedError: the client left; `work` was cancelled and has finished.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_client_disconnects(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        await asyncio.wait({task, watcher})
    if task.cancelled() and watcher.done() and not watcher.cancelled():
        raise ClientDisconnectedError
    return task.result()


def _api_key(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-api-key")


class JSONResponse(Response):
    """A JSON response serialised with orjson (several times faster than the stdlib)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class _Rejected(AgentRLError):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


Frames = Callable[..., list[bytes]]


@dataclass(slots=True)
class _ChatTurn:
    """One parsed chat request and how its protocol answers it, plain or streamed.

    `respond` renders the choices as the JSON body; a stream is `start()`, `delta()` for every
    sampled text delta, `finish()` with the choices (or `fail(status, envelope)` after an
    error), then `end()`; each returns the SSE frames to send.
    """

    chat: ChatRequest
    respond: Callable[[list[ChatChoice]], dict[str, Any]]
    start: Frames
    delta: Frames
    finish: Frames
    fail: Frames
    end: Frames = list


@dataclass(frozen=True, slots=True)
class _ChatProtocol:
    """A chat endpoint: its metrics label, error envelope, and how a payload becomes a turn."""

    name: str
    envelope: ErrorRenderer
    parse: Callable[[Any, GatewaySession], _ChatTurn]
    ignored_headers: tuple[str, ...] = ()
    """Request headers counted among the ignored fields when present (Anthropic's
    `anthropic-beta`: no beta changes our tokens; the adapter refuses each beta field that
    would)."""


def create_app(
    manager: SessionManager,
    *,
    model_name: str = "agent-rl-policy",
    max_request_bytes: int = 16 << 20,
    close_engine: bool = True,
    trim_heap_after_s: float | None = None,
) -> GatewayApp:
    """Build the gateway application around a session manager.

    Args:
        manager: sessions, codec and engine.
        model_name: the model name reported to clients (any requested name is accepted).
        max_request_bytes: larger request bodies are refused with 413.
        close_engine: close the engine when the app shuts down.
        trim_heap_after_s: hand freed C heap back to the OS once requests have neither started
            nor finished for this long (`heap.py`); None (the default) never does. For a
            process that is only a gateway, not for one embedded in a trainer.
    """

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        manager.start()
        trimmer = None
        if trim_heap_after_s is not None:
            metrics = manager.metrics
            heap = IdleHeapTrimmer(
                lambda: metrics.requests + metrics.request_latency.n,
                interval_s=trim_heap_after_s,
                on_trim=metrics.observe_heap_trim,
            )
            trimmer = asyncio.get_running_loop().create_task(heap.run())
        try:
            yield
        finally:
            if trimmer is not None:
                trimmer.cancel()
                await asyncio.wait([trimmer])
            await manager.stop()
            if close_engine:
                await manager.engine.close()

    # No generated docs or schema: nothing about the server is served to a caller without a key
    app = FastAPI(
        title="agent-rl gateway",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.manager = manager

    async def read_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_request_bytes:
            raise _Rejected(413, f"request body exceeds {max_request_bytes} bytes")
        # Read without Starlette's cache: `request.body()` keeps the bytes on the request, and so
        # for as long as the generation runs.
        chunks, size = [], 0
        async with contextlib.aclosing(request.stream()) as stream:
            async for chunk in stream:
                size += len(chunk)
                if size > max_request_bytes:
                    raise _Rejected(413, f"request body exceeds {max_request_bytes} bytes")
                chunks.append(chunk)
        body = b"".join(chunks)
        if not body:
            return None
        try:
            return orjson.loads(body)
        except ValueError as exc:
            raise _Rejected(400, f"request body is not valid JSON: {exc}") from None

    def session_for(request: Request, session_id: str) -> GatewaySession:
        """The data plane's session: its own key opens it (401 otherwise, whether or not the
        id exists)."""
        try:
            return manager.authenticate(session_id, _api_key(request))
        except PermissionError as exc:
            raise _Rejected(401, str(exc)) from None

    def control(request: Request) -> None:
        """The control plane's check: the gateway's control key, or 401."""
        try:
            manager.authorize_control(_api_key(request))
        except PermissionError as exc:
            raise _Rejected(401, str(exc)) from None

    def controlled_session(request: Request, session_id: str) -> GatewaySession:
        """A session the control plane names (404 when it does not live)."""
        control(request)
        try:
            return manager.get(session_id)
        except SessionNotFoundError:
            raise _Rejected(
                404, f"session {session_id} does not exist (expired or deleted?)"
            ) from None

    def error_response(render: ErrorRenderer, exc: Exception) -> JSONResponse:
        manager.metrics.request_errors += 1
        status, body = error_body(render, exc)
        return JSONResponse(body, status_code=status)

    def abandoned() -> Response:
        manager.metrics.abandoned_generations += 1
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    # -- sessions ------------------------------------------------------------------------------

    @app.post("/sessions")
    async def create_session(request: Request) -> Response:
        try:
            control(request)
            body = await read_json(request) or {}
            if not isinstance(body, dict):
                raise _Rejected(400, "the body must be a JSON object")
            unknown = set(body) - {"sampling", "metadata", "max_total_tokens"}
            if unknown:
                raise _Rejected(400, f"unknown keys {sorted(unknown)}", sorted(unknown)[0])
            try:
                session, key = manager.create(
                    sampling=body.get("sampling"),
                    metadata=body.get("metadata"),
                    max_total_tokens=body.get("max_total_tokens"),
                )
            except (ValueError, TypeError) as exc:
                raise _Rejected(400, str(exc), "sampling") from None
            except SessionLimitError as exc:
                raise _Rejected(429, str(exc)) from None
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        root = str(request.base_url).rstrip("/") + f"/sessions/{session.session_id}"
        return JSONResponse(
            {
                "session_id": session.session_id,
                "api_key": key,
                "openai_base_url": root + "/v1",
                "anthropic_base_url": root,
            }
        )

    @app.get("/sessions/{session_id}/trajectories")
    async def trajectories(session_id: str, request: Request) -> Response:
        try:
            session = controlled_session(request, session_id)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        return JSONResponse([t.model_dump(mode="json") for t in session.trajectories()])

    @app.get("/sessions/{session_id}/calls")
    async def calls(session_id: str, request: Request) -> Response:
        try:
            session = controlled_session(request, session_id)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        return JSONResponse([c.model_dump(mode="json") for c in session.calls])

    @app.post("/sessions/{session_id}/finalize")
    async def finalize(session_id: str, request: Request) -> Response:
        try:
            session = controlled_session(request, session_id)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        session.close()
        return JSONResponse(
            {
                "session_id": session_id,
                "trajectories": [t.model_dump(mode="json") for t in session.trajectories()],
            }
        )

    @app.delete("/sessions/{session_id}")
    async def delete(session_id: str, request: Request) -> Response:
        try:
            controlled_session(request, session_id)
            manager.delete(session_id)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        return JSONResponse({"session_id": session_id, "deleted": True})

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        try:
            control(request)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        return PlainTextResponse(manager.metrics.render(), media_type="text/plain; version=0.0.4")

    # -- OpenAI ------------------------------------------------------------------------------

    @app.get("/sessions/{session_id}/v1/models")
    async def models(session_id: str, request: Request) -> Response:
        try:
            session_for(request, session_id)
        except _Rejected as exc:
            return error_response(_openai_envelope, exc)
        entry = {"id": model_name, "object": "model", "created": 0, "owned_by": "agent-rl"}
        return JSONResponse({"object": "list", "data": [entry]})

    def note_ignored_headers(request: Request, protocol: _ChatProtocol, chat: ChatRequest) -> None:
        present = tuple(name for name in protocol.ignored_headers if request.headers.get(name))
        chat.ignored = (*chat.ignored, *present)
        manager.metrics.observe_ignored(protocol.name, chat.ignored)

    def chat_route(protocol: _ChatProtocol) -> Callable[[Request], Awaitable[Response]]:
        """The handler of one chat endpoint: the steps every protocol shares, in order."""

        async def handler(request: Request) -> Response:
            session_id = request.path_params["session_id"]
            started = time.perf_counter()
            manager.metrics.requests += 1
            try:
                session = session_for(request, session_id)
                # The body is not held while generating (the session has its tokens).
                turn = protocol.parse(await read_json(request), session)
            except (_Rejected, WireError) as exc:
                return error_response(protocol.envelope, exc)
            note_ignored_headers(request, protocol, turn.chat)
            if turn.chat.stream:
                return StreamingResponse(
                    _chat_stream(session, turn, protocol.envelope, started),
                    media_type="text/event-stream",
                )
            try:
                choices = await unless_disconnected(session.chat(turn.chat), request.receive)
            except ClientDisconnectedError:
                return abandoned()
            except Exception as exc:  # deliberate boundary: answer in the protocol's envelope
                return error_response(protocol.envelope, exc)
            finally:
                manager.metrics.request_latency.observe(time.perf_counter() - started)
            return JSONResponse(turn.respond(choices))

        return handler

    async def _chat_stream(
        session: GatewaySession, turn: _ChatTurn, envelope: ErrorRenderer, started: float
    ) -> AsyncIterator[bytes]:
        for frame in turn.start():
            yield frame
        try:
            async for item in _chat_events(session, turn.chat):
                frames = turn.delta(item) if isinstance(item, StreamDelta) else turn.finish(item)
                for frame in frames:
                    yield frame
        except Exception as exc:  # deliberate boundary: the stream has started; send an error
            manager.metrics.request_errors += 1
            status, body = error_body(envelope, exc)
            for frame in turn.fail(status, body):
                yield frame
        finally:
            manager.metrics.request_latency.observe(time.perf_counter() - started)
        for frame in turn.end():
            yield frame

    # -- OpenAI Chat Completions ---------------------------------------------------------------

    def openai_turn(payload: Any, session: GatewaySession) -> _ChatTurn:
        chat = parse_openai_request(payload, session.history)
        response_id, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        stream = OpenAIChunkStream(
            model=model_name,
            created=created,
            response_id=response_id,
            n=chat.n,
            include_usage=openai_include_usage(payload),
        )

        def finish(choices: list[ChatChoice]) -> list[bytes]:
            chunks = [chunk for choice in choices for chunk in stream.finish(choice)]
            return [sse_event(chunk) for chunk in chunks + stream.usage(choices)]

        return _ChatTurn(
            chat,
            respond=lambda choices: openai_response(
                choices, model=model_name, created=created, response_id=response_id
            ),
            start=lambda: [sse_event(chunk) for chunk in stream.start()],
            delta=lambda delta: [sse_event(chunk) for chunk in stream.delta(delta)],
            finish=finish,
            fail=lambda _, body: [sse_event(body)],
            end=lambda: [SSE_DONE],
        )

    # -- OpenAI Responses ----------------------------------------------------------------------

    def responses_turn(payload: Any, session: GatewaySession) -> _ChatTurn:
        request = parse_responses_request(payload, session.history, session.responses)
        header = ResponseHeader(
            response_id="resp_" + uuid.uuid4().hex,
            created_at=int(time.time()),
            model=model_name,
            tools=request.tools,
            previous_response_id=request.previous_response_id,
            store=request.store,
        )
        stream = ResponsesEventStream(header)

        def remember(choice: ChatChoice, items: list[dict[str, Any]]) -> None:
            if request.store:
                reply = reply_message(choice, items)
                remember_response(session.responses, header.response_id, request, reply)

        def respond(choices: list[ChatChoice]) -> dict[str, Any]:
            body = responses_response(header, choices[0])
            remember(choices[0], body["output"])
            return body

        def finish(choices: list[ChatChoice]) -> list[bytes]:
            events = stream.finish(choices[0])
            remember(choices[0], stream.output)
            return [responses_sse_event(event) for event in events]

        return _ChatTurn(
            request.chat,
            respond=respond,
            start=lambda: [responses_sse_event(event) for event in stream.start()],
            delta=lambda delta: [responses_sse_event(event) for event in stream.delta(delta)],
            finish=finish,
            fail=lambda status, body: [
                responses_sse_event(event) for event in stream.fail(status, body)
            ],
        )

    # -- Anthropic Messages --------------------------------------------------------------------

    def anthropic_turn(payload: Any, session: GatewaySession) -> _ChatTurn:
        chat = parse_anthropic_request(payload, session.history)
        message_id = "msg_" + uuid.uuid4().hex
        stream = AnthropicEventStream(model=model_name, message_id=message_id)

        def respond(choices: list[ChatChoice]) -> dict[str, Any]:
            (choice,) = choices
            manager.metrics.invalid_tool_inputs += invalid_tool_inputs(choice)
            return anthropic_response(choice, model=model_name, message_id=message_id)

        def finish(choices: list[ChatChoice]) -> list[bytes]:
            manager.metrics.invalid_tool_inputs += invalid_tool_inputs(choices[0])
            return [anthropic_sse_event(event) for event in stream.finish(choices[0])]

        return _ChatTurn(
            chat,
            respond=respond,
            start=lambda: [anthropic_sse_event(event) for event in stream.start()],
            delta=lambda delta: [anthropic_sse_event(event) for event in stream.delta(delta)],
            finish=finish,
            fail=lambda _, body: [anthropic_sse_event(body)],
        )

    protocols = {
        "chat/completions": _ChatProtocol("openai", _openai_envelope, openai_turn),
        "responses": _ChatProtocol("responses", _openai_envelope, responses_turn),
        "messages": _ChatProtocol(
            "anthropic", _anthropic_envelope, anthropic_turn, ("anthropic-beta",)
        ),
    }
    routes = {
        path: (chat_route(protocol), protocol.envelope) for path, protocol in protocols.items()
    }
    for path, (handler, _) in routes.items():
        app.add_route(f"/sessions/{{session_id}}/v1/{path}", handler, methods=["POST"])

    async def count_tokens(request: Request) -> Response:
        try:
            session = session_for(request, request.path_params["session_id"])
            chat = parse_anthropic_count_tokens(await read_json(request))
            note_ignored_headers(request, protocols["messages"], chat)
            tokens = await session.count_prompt_tokens(chat)
        except Exception as exc:  # deliberate boundary: answer in the protocol's envelope
            return error_response(_anthropic_envelope, exc)
        return JSONResponse({"input_tokens": tokens})

    app.add_route("/sessions/{session_id}/v1/messages/count_tokens", count_tokens, methods=["POST"])
    return GatewayApp(app, routes, manager)


_CHAT_PATH = re.compile(r"/sessions/([^/]+)/v1/(chat/completions|responses|messages)")


class GatewayApp:
    """The gateway's ASGI entry point: chat requests go straight to their handlers.

    A chat turn is the gateway's hot path; FastAPI's middleware and router layers cost about a
    tenth of it. `POST /sessions/<id>/v1/chat/completions`, `.../v1/responses` and
    `.../v1/messages` are therefore dispatched here (an unexpected error still becomes a 500 in
    the protocol's envelope), and everything else — lifespan and `.../v1/messages/count_tokens`
    included — goes to the FastAPI app, which serves the same three routes too. The match is on
    the ASGI path, which carries no query string, so the SDK's `.../v1/messages?beta=true` takes
    the fast path too.
    """

    def __init__(
        self,
        api: FastAPI,
        chat_routes: dict[str, tuple[Callable[[Request], Any], ErrorRenderer]],
        manager: SessionManager,
    ) -> None:
        self.api = api
        self.state = api.state
        self._chat_routes = chat_routes
        self._manager = manager

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            path = scope["path"]
            root = scope.get("root_path", "")
            if root and path.startswith(root):
                path = path[len(root) :]
            match = _CHAT_PATH.fullmatch(path)
            if match is not None:
                handler, envelope = self._chat_routes[match[2]]
                scope["path_params"] = {"session_id": match[1]}
                try:
                    response = await handler(Request(scope, receive))
                except Exception as exc:  # deliberate boundary: answer in the envelope
                    self._manager.metrics.request_errors += 1
                    status, body = envelope(
                        500, f"internal error: {type(exc).__name__}: {exc}", None, None
                    )
                    response = JSONResponse(body, status_code=status)
                await response(scope, receive, send)
                return
        await self.api(scope, receive, send)


async def _chat_events(
    session: GatewaySession, chat: ChatRequest
) -> AsyncIterator[StreamDelta | list[ChatChoice]]:
    """Run a chat request, yielding text deltas as they are sampled, then the choices.

    If the consumer goes away (client disconnect), the generation is cancelled and the session
    releases its reservation; nothing is committed.
    """
    queue: asyncio.Queue[StreamDelta] = asyncio.Queue()

    async def sink(delta: StreamDelta) -> None:
        queue.put_nowait(delta)

    task = asyncio.ensure_future(session.chat(chat, on_delta=sink))
    try:
        while not task.done() or not queue.empty():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        yield task.result()
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait([task])
