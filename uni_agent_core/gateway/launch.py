"""The gateway process: its session manager over a given engine, and serving it over HTTP
(`agent-rl gateway serve`). It never builds an engine: callers build one from the recipe
(`rollout/build.py`) and hand it here."""

from __future__ import annotations

import gc
import os
from typing import Any

from uni_agent_core.config import GatewayConfig
from uni_agent_core.gateway.manager import CONTROL_KEY_VARIABLE, SessionManager
from uni_agent_core.gateway.session import SessionSettings
from uni_agent_core.inference.servers import free_port
from uni_agent_core.inference.types import Engine


def settings_from_config(gateway: GatewayConfig, max_total_tokens: int | None) -> SessionSettings:
    """Session defaults from the recipe's gateway section."""
    return SessionSettings(
        temperature=gateway.sampling.temperature,
        top_p=gateway.sampling.top_p,
        top_k=gateway.sampling.top_k,
        max_tokens=gateway.sampling.max_tokens,
        sampling_override=gateway.sampling_override,
        max_total_tokens=gateway.max_total_tokens or max_total_tokens,
        enable_rollback=gateway.enable_rollback,
    )


def session_manager(
    engine: Engine, tokenizer: Any, gateway: GatewayConfig, max_total_tokens: int | None
) -> SessionManager:
    """The session manager of a recipe's gateway section over `engine`."""
    return SessionManager(
        engine,
        tokenizer,
        settings=settings_from_config(gateway, max_total_tokens),
        tool_parser=gateway.tool_parser,
        session_ttl_s=gateway.session_ttl_s,
        max_sessions=gateway.max_sessions,
    )


SERVER_GC_THRESHOLDS = (50_000, 50, 100)
"""Collector thresholds of a standalone gateway process (CPython's defaults: 700, 10, 10)."""

SERVER_HEAP_TRIM_AFTER_S = 1.0
"""A standalone gateway hands a burst's freed heap back after this long without requests."""

SHUTDOWN_GRACE_S = 2
"""On SIGTERM or Ctrl-C, requests in flight get this many seconds to finish (whole seconds:
uvicorn's setting is an int); then they are cancelled (their generations abort, nothing is
committed), sessions close and the engine stops."""


def serve(
    manager: SessionManager, *, host: str, port: int, model_name: str, backlog: int = 2048
) -> None:
    """Run the gateway process until interrupted (blocks).

    The garbage collector is tuned for a server whose objects die by reference counting:
    - what start-up allocated (modules, the tokenizer and its template, the engine: about 450K
      container objects with `tiny`) is never garbage, so it is moved out of the collector's
      generations (`gc.freeze()`); otherwise every full collection rescans all of it;
    - collections run less often (`SERVER_GC_THRESHOLDS`): each one traverses the container
      objects of every request in flight (parsed bodies, messages, records), so under load
      CPython's default thresholds (700, 10, 10) cost throughput (measured: `bench/README.md`,
      "Gateway").

    Freed C heap is handed back to the OS once a burst of requests is over (`heap.py`). A
    shutdown waits at most `SHUTDOWN_GRACE_S` for requests in flight.

    The control key (session create, read, finalize, delete; `/metrics`) is
    `$AGENT_RL_GATEWAY_CONTROL_KEY` when set, else the manager's own, printed at start for the
    operator (never give it to an agent).
    """
    import uvicorn

    from uni_agent_core.gateway.server import create_app

    port = port or free_port(host)
    app = create_app(manager, model_name=model_name, trim_heap_after_s=SERVER_HEAP_TRIM_AFTER_S)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*SERVER_GC_THRESHOLDS)
    chosen = os.environ.get(CONTROL_KEY_VARIABLE)
    if chosen:
        manager.control_key = chosen
    print(
        f"agent-rl gateway on http://{host}:{port}  "
        "(POST /sessions with the control key to start a session)"
    )
    if not chosen:
        print(f"control key: {manager.control_key}  (set {CONTROL_KEY_VARIABLE} to choose it)")
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        backlog=backlog,
        timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
    )
