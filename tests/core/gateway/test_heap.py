"""`IdleHeapTrimmer`: trims once a request counter stops moving, never while it moves."""

from __future__ import annotations

import asyncio
import ctypes.util
import sys

import pytest
from support.gateway_control import CONTROL, CONTROL_KEY

from uni_agent_core.gateway.heap import IdleHeapTrimmer

GLIBC = sys.platform == "linux" and "libc.so.6" in (ctypes.util.find_library("c") or "")


class Counter:
    def __init__(self) -> None:
        self.value = 0

    def __call__(self) -> int:
        return self.value


def test_due_after_one_quiet_interval_following_activity() -> None:
    requests = Counter()
    trimmer = IdleHeapTrimmer(requests)
    assert not trimmer.due()  # idle since start: nothing to give back
    requests.value += 5
    assert not trimmer.due()  # busy
    requests.value += 1
    assert not trimmer.due()  # still busy
    assert trimmer.due()  # quiet for one interval: trim
    assert not trimmer.due()  # once per burst
    requests.value += 1
    assert not trimmer.due()
    assert trimmer.due()


def test_bad_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="interval_s must be positive"):
        IdleHeapTrimmer(Counter(), interval_s=0)


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is a glibc function")
def test_trim_calls_malloc_trim_and_reports_it() -> None:
    from uni_agent_core.gateway.metrics import GatewayMetrics

    metrics = GatewayMetrics()
    trimmer = IdleHeapTrimmer(Counter(), on_trim=metrics.observe_heap_trim)
    assert trimmer.supported
    assert trimmer.trim() and trimmer.trims == 1 and trimmer.trim_seconds > 0
    assert metrics.heap_trims == 1 and metrics.heap_trim_seconds == trimmer.trim_seconds
    assert "agent_rl_gateway_heap_trims_total 1" in metrics.render()


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is a glibc function")
def test_run_trims_once_the_counter_stops() -> None:
    requests = Counter()

    async def scenario() -> IdleHeapTrimmer:
        trimmer = IdleHeapTrimmer(requests, interval_s=0.02)
        task = asyncio.create_task(trimmer.run())
        requests.value += 1  # a request, then quiet
        deadline = asyncio.get_running_loop().time() + 10
        while trimmer.trims == 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # more quiet intervals: still one trim for the burst
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return trimmer

    assert asyncio.run(scenario()).trims == 1


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is a glibc function")
def test_an_app_trims_after_its_requests_have_finished(tiny_tokenizer) -> None:
    """Activity is requests started plus finished: a slow generation that outlasts the quiet
    interval is followed by a second trim once it has been answered."""
    import time

    from fastapi.testclient import TestClient

    from uni_agent_core.gateway.manager import SessionManager
    from uni_agent_core.gateway.server import create_app
    from uni_agent_core.inference.scripted import ScriptedEngine

    class SlowEngine(ScriptedEngine):
        async def generate(self, request):
            await asyncio.sleep(0.5)
            return await super().generate(request)

    engine = SlowEngine(tiny_tokenizer)
    engine.replies = {0: "done"}
    manager = SessionManager(engine, tiny_tokenizer, control_key=CONTROL_KEY)
    metrics = manager.metrics
    finished: list[float] = []
    trimmed: list[float] = []
    observe_latency, observe_trim = metrics.request_latency.observe, metrics.observe_heap_trim

    def on_finish(seconds: float) -> None:
        finished.append(time.monotonic())
        observe_latency(seconds)

    def on_trim(seconds: float) -> None:
        trimmed.append(time.monotonic())
        observe_trim(seconds)

    metrics.request_latency.observe = on_finish
    metrics.observe_heap_trim = on_trim
    app = create_app(manager, trim_heap_after_s=0.1)
    with TestClient(app) as client:
        created = client.post("/sessions", json={}, headers=CONTROL).json()
        reply = client.post(
            f"/sessions/{created['session_id']}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {created['api_key']}"},
        )
        assert reply.status_code == 200 and len(finished) == 1
        deadline = time.monotonic() + 10
        while not any(t > finished[0] for t in trimmed) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert any(t > finished[0] for t in trimmed), (finished, trimmed)
        assert metrics.heap_trims == len(trimmed)
        assert "agent_rl_gateway_heap_trims_total" in client.get("/metrics", headers=CONTROL).text
