"""The gateway served inside the caller's loop: leaving it does not wait on abandoned requests."""

from __future__ import annotations

import asyncio
import time

import httpx

from uni_agent_core.config.gateway import GatewayConfig
from uni_agent_core.gateway.embedded import serving_gateway
from uni_agent_core.gateway.launch import session_manager


def test_leaving_cancels_requests_still_in_flight_after_the_grace(
    tiny_tokenizer, scripted_engine_cls
) -> None:
    engine = scripted_engine_cls(tiny_tokenizer)
    engine.delay = 3600.0  # a generation that would outlive the run
    manager = session_manager(engine, tiny_tokenizer, GatewayConfig(), None)
    session, key = manager.create()

    async def main() -> tuple[float, object]:
        async with serving_gateway(manager, shutdown_grace_s=0.5) as url:
            client = httpx.AsyncClient(timeout=60.0)
            request = asyncio.create_task(
                client.post(
                    f"{url}/sessions/{session.session_id}/v1/chat/completions",
                    headers={"Authorization": f"Bearer {key}"},
                    json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                )
            )
            while not engine.requests:
                await asyncio.sleep(0.01)
            started = time.perf_counter()
        left_s = time.perf_counter() - started
        outcome = (await asyncio.gather(request, return_exceptions=True))[0]
        await client.aclose()
        return left_s, outcome

    left_s, outcome = asyncio.run(main())
    assert left_s < 10.0  # the grace (rounded up to 1 s), not the hour-long generation
    # The client saw its request cut: a 500 from uvicorn, or the connection dropped.
    assert isinstance(outcome, httpx.HTTPError) or outcome.status_code == 500
    assert session.trajectories() == []  # the cancelled generation committed nothing


def test_failed_accepts_are_counted_and_logged_once_per_thousand(caplog) -> None:
    from uni_agent_core.gateway.embedded import counting_accept_errors
    from uni_agent_core.gateway.metrics import GatewayMetrics

    metrics, others = GatewayMetrics(), []
    loop = asyncio.new_event_loop()
    loop.set_exception_handler(lambda _, context: others.append(context["message"]))
    try:
        with caplog.at_level("WARNING"), counting_accept_errors(loop, metrics):
            for _ in range(1500):
                loop.call_exception_handler(
                    {
                        "message": "socket.accept() out of system resource",
                        "exception": OSError(24, "Too many open files"),
                    }
                )
            loop.call_exception_handler({"message": "something else"})
        loop.call_exception_handler({"message": "after"})
    finally:
        loop.close()
    assert metrics.accept_errors == 1500
    assert "agent_rl_gateway_accept_errors_total 1500" in metrics.render()
    assert len([r for r in caplog.records if "could not accept" in r.message]) == 2
    assert others == ["something else", "after"]
