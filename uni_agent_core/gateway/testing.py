"""Running a gateway in-process on loopback (tests, benchmarks, notebooks).

`running_gateway` serves `create_app(manager)` with uvicorn on a background thread bound to
127.0.0.1 and a free port, waits until it answers, and always shuts it down. `control_headers`
are the headers of the gateway's control plane (creating, reading and deleting sessions).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from uni_agent_core.gateway.launch import free_port
from uni_agent_core.gateway.manager import SessionManager


def control_headers(manager: SessionManager) -> dict[str, str]:
    """The `Authorization` header of `manager`'s control plane."""
    return {"Authorization": f"Bearer {manager.control_key}"}


@contextmanager
def running_gateway(
    manager: SessionManager, *, model_name: str = "agent-rl-policy", start_timeout_s: float = 30.0
) -> Iterator[str]:
    """Serve the gateway on a free loopback port; yields its root URL."""
    import uvicorn

    from uni_agent_core.gateway.server import create_app

    port = free_port()
    config = uvicorn.Config(
        create_app(manager, model_name=model_name),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="gateway", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout_s
    try:
        while True:
            try:
                if httpx.get(url + "/health", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError(f"the gateway did not start on {url}")
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=10)
