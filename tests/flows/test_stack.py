"""`agent-rl stack`: a real Prefect server, the three pools, every deployment, a worker, by pid."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from uni_agent_core import prefect_stack

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _registered(api_url: str) -> tuple[set[str], dict[str, Any]]:
    """The work pools and the deployments (`flow/deployment`) the server at `api_url` holds,
    read through Prefect's client (what `prefect work-pool ls` and `deployment ls` print)."""
    from prefect.client.orchestration import PrefectClient

    async def read() -> tuple[set[str], dict[str, Any]]:
        async with PrefectClient(api_url) as client:
            pools = {pool.name for pool in await client.read_work_pools()}
            flows = {flow.id: flow.name for flow in await client.read_flows()}
            deployments = {
                f"{flows[d.flow_id]}/{d.name}": d for d in await client.read_deployments()
            }
        return pools, deployments

    return asyncio.run(read())


@pytest.mark.slow
def test_stack_up_registers_pools_and_deployments_and_down_stops_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    monkeypatch.setenv(prefect_stack.HOME_ENV, str(tmp_path / "home"))
    port = _free_port()
    state = prefect_stack.up(ROOT, port=port)
    try:
        env = prefect_stack.stack_env(ROOT, port)
        assert env["PREFECT_API_URL"] == f"http://127.0.0.1:{port}/api"
        pools, deployments = _registered(env["PREFECT_API_URL"])
        assert {"cpu", "gpu", "ascend"} <= pools
        assert {
            "agent-rl/train",
            "agent-rl/train-gpu",
            "agent-rl/train-ascend",
            "curriculum-refresh/nightly",
            "evaluate/on-demand",
            "compare-runs/on-demand",
        } <= set(deployments)
        gpu = deployments["agent-rl/train-gpu"]
        assert gpu.work_pool_name == "gpu"
        assert gpu.job_variables["env"]["AGENT_RL_POOL_PROFILE"] == "pools/gpu.yaml"
        (nightly,) = deployments["curriculum-refresh/nightly"].schedules
        assert (nightly.schedule.cron, nightly.schedule.timezone) == ("0 3 * * *", "UTC")

        # A second `up` reuses the running stack; `env` prints where it is.
        assert prefect_stack.up(ROOT, port=port) == state
        assert prefect_stack.print_env(ROOT)
        assert f"PREFECT_API_URL={env['PREFECT_API_URL']}" in capsys.readouterr().out
        recorded = json.loads((tmp_path / "home" / prefect_stack.STATE).read_text())
        assert recorded == state
    finally:
        assert prefect_stack.down(ROOT)
    assert not prefect_stack._running(state["server"])
    assert not prefect_stack._running(state["worker"])
    assert not prefect_stack.print_env(ROOT)
