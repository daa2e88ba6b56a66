"""Every sandbox of a run starts through one pool (`TaskSandboxes`): its starts are capped, a
failed start is retried with backoff, and the counts reach each step's `sandbox/*` metrics."""

from __future__ import annotations

import asyncio

import pytest

import uni_agent_core.envs.verifier as verifier
from uni_agent_core.config.sandbox import LocalSandboxConfig
from uni_agent_core.envs.verifier import task_sandbox_factory
from uni_agent_core.rl.metrics import sandbox_step_metrics
from uni_agent_core.sandbox.base import SandboxError
from uni_agent_core.types import TaskSpec


class Starts:
    """Fake sandboxes whose first `failures` starts fail; counts starts in flight."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.in_flight = 0
        self.peak = 0
        self.closed = 0

    def build(self, config, **placement):
        starts = self

        class Fake:
            async def start(self) -> None:
                starts.in_flight += 1
                starts.peak = max(starts.peak, starts.in_flight)
                try:
                    await asyncio.sleep(0.01)
                    if starts.failures > 0:
                        starts.failures -= 1
                        raise SandboxError("could not start")
                finally:
                    starts.in_flight -= 1

            async def close(self) -> None:
                starts.closed += 1

        return Fake()


@pytest.fixture
def starts(monkeypatch) -> Starts:
    fake = Starts(failures=3)
    monkeypatch.setattr(verifier, "build_sandbox", fake.build)
    monkeypatch.setattr(
        verifier, "sandbox_overrides", lambda task, config: {"workdir": task.instance_id}
    )
    return fake


def _task(i: int) -> TaskSpec:
    return TaskSpec(instance_id=f"t{i}", problem_statement="fix it")


def test_starts_are_capped_and_failed_ones_retried(starts) -> None:
    config = LocalSandboxConfig(max_concurrent_starts=3, start_retries=2, start_backoff_s=0.01)
    sandboxes = task_sandbox_factory(config)

    async def episode(i: int) -> None:
        async with sandboxes(_task(i)):
            await asyncio.sleep(0.01)

    async def run() -> None:
        await asyncio.gather(*(episode(i) for i in range(12)))

    asyncio.run(run())
    stats = sandboxes.pool.stats
    assert starts.peak <= 3 and stats.starting_peak == starts.peak
    assert (stats.start_failures, stats.retries, stats.exhausted) == (3, 3, 0)
    assert stats.started == 12 and starts.closed == 15  # failed starts are closed too


def test_a_start_that_keeps_failing_is_given_up_and_counted(starts) -> None:
    starts.failures = 10
    sandboxes = task_sandbox_factory(LocalSandboxConfig(start_retries=1, start_backoff_s=0.001))

    async def episode() -> None:
        async with sandboxes(_task(0)):
            pass

    with pytest.raises(SandboxError, match="failed to start 2 times"):
        asyncio.run(episode())
    assert sandboxes.pool.stats.exhausted == 1


def test_the_step_metrics_are_the_steps_share_of_the_counts() -> None:
    before = {"start_attempts": 10, "start_failures": 1, "retries": 1, "exhausted": 0}
    after = {"start_attempts": 18, "start_failures": 3, "retries": 2, "exhausted": 1}
    metrics = sandbox_step_metrics(before, {**after, "starting_peak": 4})
    assert metrics == {
        "sandbox/start_attempts": 8.0,
        "sandbox/start_failures": 2.0,
        "sandbox/retries": 1.0,
        "sandbox/exhausted": 1.0,
        "sandbox/starting_peak": 4.0,
    }


def test_warm_spares_serve_the_placement_asked_for_last(starts) -> None:
    """A group's episodes and its verifiers share a placement: with `warm_pool_size`, spares
    started for it after the first request serve the later ones; asking for another task's
    placement replaces them (the pool never holds more than `warm_pool_size`)."""
    from uni_agent_core.config.sandbox import DockerSandboxConfig

    starts.failures = 0
    sandboxes = task_sandbox_factory(DockerSandboxConfig(warm_pool_size=2, image="img"))

    async def run() -> None:
        for task in (_task(0), _task(0), _task(0)):
            async with sandboxes(task):
                await asyncio.sleep(0.05)  # the refill runs meanwhile
        async with sandboxes(_task(1)):
            await asyncio.sleep(0.05)
        async with sandboxes(_task(1)):
            pass
        await sandboxes.aclose()

    asyncio.run(run())
    stats = sandboxes.pool.stats
    assert stats.warm_hits == 3  # the second and third of task 0, the second of task 1
    assert stats.spares_evicted >= 1  # task 0's spares made room for task 1's
    assert stats.closed == stats.start_attempts  # spares left at the end were closed too
