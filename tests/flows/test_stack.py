"""`agent-rl stack`: a real Prefect server, the three pools, every deployment, a worker, by pid."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from uni_agent_core import prefect_stack

ROOT = Path(__file__).resolve().parents[2]
PREFECT = str(Path(sys.executable).with_name("prefect"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _prefect(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [PREFECT, *args], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout


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
        pools = _prefect(env, "work-pool", "ls")
        assert all(f" {pool} " in pools for pool in ("cpu", "gpu", "ascend"))
        names = _prefect(env, "deployment", "ls")
        for name in ("train", "train-gpu", "train-ascend", "nightly", "on-demand"):
            assert name in names
        gpu = _prefect(env, "deployment", "inspect", "agent-rl/train-gpu")
        assert "'AGENT_RL_POOL_PROFILE': 'pools/gpu.yaml'" in gpu
        nightly = _prefect(env, "deployment", "inspect", "curriculum-refresh/nightly")
        assert "0 3 * * *" in nightly and "UTC" in nightly

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
