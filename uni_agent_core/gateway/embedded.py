"""Serving the gateway inside the caller's event loop (a training or evaluation run).

A run drives harnesses (async HTTP clients), the engine and the trainer from one asyncio loop;
the gateway's HTTP server runs as a task of that same loop, so weight updates and pauses reach
the engine without crossing threads. Signals stay with the caller: Ctrl-C stops the run, not
only the server.

When the caller leaves, requests still in flight belong to episodes it has abandoned (an async
run's last step launches rollouts it will never train on): they get `shutdown_grace_s` to
finish, then are cancelled, which aborts their generations and commits nothing to their sessions.

A connection the process cannot accept (out of descriptors) is counted in the gateway's
`accept_errors_total` and logged once per `ACCEPT_ERROR_LOG_EVERY`, not once per event: asyncio
reports each failed `accept()` to the loop's exception handler, and a flood of them would fill
the log (`counting_accept_errors`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

from uni_agent_core.gateway.launch import free_port
from uni_agent_core.gateway.manager import SessionManager
from uni_agent_core.gateway.metrics import GatewayMetrics

logger = logging.getLogger(__name__)

ACCEPT_ERROR_LOG_EVERY = 1000
"""One log line per this many connections the process could not accept."""

_ACCEPT_ERROR = "socket.accept() out of system resource"
"""How asyncio's accept loop reports a failed `accept()` to the exception handler."""


@contextlib.contextmanager
def counting_accept_errors(
    loop: asyncio.AbstractEventLoop, metrics: GatewayMetrics
) -> Iterator[None]:
    """While inside, the loop's failed `accept()`s are counted in `metrics.accept_errors` and
    logged once per `ACCEPT_ERROR_LOG_EVERY`; every other report goes where it went before."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith(_ACCEPT_ERROR):
            if metrics.accept_errors % ACCEPT_ERROR_LOG_EVERY == 0:
                logger.warning(
                    "could not accept a connection (%s); %d so far",
                    context.get("exception"),
                    metrics.accept_errors + 1,
                )
            metrics.accept_errors += 1
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)
    try:
        yield
    finally:
        loop.set_exception_handler(previous)


def _server_class():  # noqa: ANN202 - uvicorn is imported lazily
    import uvicorn

    class InLoopServer(uvicorn.Server):
        """uvicorn without its signal handlers (the embedding program owns the signals)."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return InLoopServer


@contextlib.asynccontextmanager
async def serving_gateway(
    manager: SessionManager,
    *,
    model_name: str = "agent-rl-policy",
    host: str = "127.0.0.1",
    start_timeout_s: float = 30.0,
    shutdown_grace_s: float = 5.0,
) -> AsyncIterator[str]:
    """Serve the gateway on a free port of `host` in this loop; yields its root URL.

    Args:
        shutdown_grace_s: how long requests in flight at exit may still run before they are
            cancelled (a generation can take minutes on a CPU; the caller no longer waits).

    Raises:
        RuntimeError: the server did not come up within `start_timeout_s`.
    """
    import uvicorn

    from uni_agent_core.gateway.server import create_app

    port = free_port(host)
    config = uvicorn.Config(
        create_app(manager, model_name=model_name),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=max(1, math.ceil(shutdown_grace_s)),
    )
    server = _server_class()(config)
    task = asyncio.create_task(server.serve(), name="gateway-server")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + start_timeout_s
    with counting_accept_errors(loop, manager.metrics):
        try:
            while not server.started:
                if task.done():
                    task.result()
                    raise RuntimeError(f"the gateway stopped while starting on {host}:{port}")
                if loop.time() > deadline:
                    raise RuntimeError(f"the gateway did not start on {host}:{port}")
                await asyncio.sleep(0.02)
            yield f"http://{host}:{port}"
        finally:
            server.should_exit = True
            await asyncio.wait_for(task, timeout=shutdown_grace_s + 30.0)
