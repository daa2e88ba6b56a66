"""Serving the gateway inside the caller's event loop (a training or evaluation run).

A run drives harnesses (async HTTP clients), the engine and the trainer from one asyncio loop;
the gateway's HTTP server runs as a task of that same loop, so weight updates and pauses reach
the engine without crossing threads. Signals stay with the caller: Ctrl-C stops the run, not
only the server.

When the caller leaves, requests still in flight belong to episodes it has abandoned (an async
run's last step launches rollouts it will never train on): they get `shutdown_grace_s` to
finish, then are cancelled, which aborts their generations and commits nothing to their sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Iterator

from uni_agent_core.gateway.launch import free_port
from uni_agent_core.gateway.manager import SessionManager


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
