"""`agent-rl stack up | down | status`: a local Prefect stack for a fresh machine, on loopback.

`up` starts a Prefect server on 127.0.0.1 with its home (sqlite database, settings) under
`<project>/.prefect`, waits for its health endpoint, creates the `cpu`, `gpu` and `ascend`
process work pools, deploys every deployment of `prefect.yaml`, and starts a worker on `cpu`; the
pids and the API URL go to `.prefect/stack.json`. `down` stops exactly those processes (by pid,
process group). Only the `prefect` command line is used, so `uni_agent_core` still never imports
prefect.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

STATE = "stack.json"
POOLS = ("cpu", "gpu", "ascend")
HOME_ENV = "AGENT_RL_STACK_HOME"
_ENV_OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def _home(project: Path) -> Path:
    """The stack's Prefect home: `$AGENT_RL_STACK_HOME`, else `<project>/.prefect`."""
    return Path(os.environ.get(HOME_ENV) or project / ".prefect")


def stack_env(project: Path, port: int) -> dict[str, str]:
    """The environment every prefect command of the stack runs with."""
    return {
        **os.environ,
        **_ENV_OFF,
        "PREFECT_HOME": str(_home(project)),
        "PREFECT_API_URL": f"http://127.0.0.1:{port}/api",
    }


def _prefect() -> str:
    return str(Path(sys.executable).with_name("prefect"))


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _spawn(command: list[str], env: dict[str, str], log: Path) -> int:
    handle = log.open("ab")
    process = subprocess.Popen(
        command, env=env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
    )
    return process.pid


def up(project: Path, *, port: int = 4200, timeout_s: float = 120.0) -> dict:
    """Start server, pools, deployments and worker; returns the recorded state.

    A stack that is already up is reused: only the deployments are refreshed.
    """
    home = _home(project)
    home.mkdir(parents=True, exist_ok=True)
    state_path = home / STATE
    state = _recorded(project)
    if state is not None:
        if _running(state.get("server")) and _running(state.get("worker")):
            if not _healthy(state["port"]):
                raise RuntimeError(
                    f"a stack is recorded ({state_path}) but its server does not answer; "
                    "run `agent-rl stack down` first"
                )
            print(f"stack already up: {state['api_url']}; redeploying prefect.yaml")
            _deploy(project, stack_env(project, state["port"]))
            return state
        if _alive(state):
            raise RuntimeError(f"a stack is half up ({state_path}); run `agent-rl stack down`")
    env = stack_env(project, port)
    server = _spawn(
        [_prefect(), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env,
        home / "server.log",
    )
    deadline = time.monotonic() + timeout_s
    while not _healthy(port):
        if time.monotonic() > deadline:
            _kill(server)
            raise RuntimeError(f"the Prefect server did not start; see {home / 'server.log'}")
        time.sleep(0.5)
    print(f"prefect server: http://127.0.0.1:{port} (pid {server})")
    _create_pools(env)
    _deploy(project, env)
    worker = _spawn([_prefect(), "worker", "start", "--pool", "cpu"], env, home / "worker.log")
    print(f"worker on pool cpu: pid {worker} (log {home / 'worker.log'})")
    state = {"port": port, "api_url": env["PREFECT_API_URL"], "server": server, "worker": worker}
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    print(f"export PREFECT_API_URL={env['PREFECT_API_URL']} PREFECT_HOME={home}")
    return state


def _deploy(project: Path, env: dict[str, str]) -> None:
    """Register every deployment of `prefect.yaml` (re-running updates them)."""
    done = subprocess.run(
        [_prefect(), "--no-prompt", "deploy", "--all"],
        env=env,
        cwd=project,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"prefect deploy --all failed:\n{done.stdout[-2000:]}{done.stderr}")
    print(
        "deployed: agent-rl/train, curriculum-refresh/nightly, evaluate/on-demand, "
        "compare-runs/on-demand (pool cpu); agent-rl/train-gpu, agent-rl/train-ascend "
        "(pools gpu, ascend: start a worker there with `prefect worker start --pool gpu`)"
    )


def _create_pools(env: dict[str, str]) -> None:
    """The `cpu`, `gpu` and `ascend` process pools (the ones that exist are left alone).

    A local stack only serves `cpu`; the accelerator pools exist so that every deployment of
    `prefect.yaml` registers, and a worker on a GPU or NPU node can serve them.
    """
    listed = subprocess.run(
        [_prefect(), "work-pool", "ls"], env=env, capture_output=True, text=True, check=True
    )
    for pool in POOLS:
        if f" {pool} " not in listed.stdout:
            subprocess.run(
                [_prefect(), "work-pool", "create", pool, "--type", "process"],
                env=env,
                check=True,
                capture_output=True,
            )


def _alive(state: dict) -> bool:
    return any(_running(state.get(key)) for key in ("server", "worker"))


def _running(pid: int | None) -> bool:
    if not pid:
        return False
    with contextlib.suppress(ChildProcessError, OSError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that exited: reap it
            return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _kill(pid: int, grace_s: float = 10.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + grace_s
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _running(pid):
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)


def _recorded(project: Path) -> dict | None:
    """The state `up` recorded, or None when no stack is recorded."""
    state_path = _home(project) / STATE
    return json.loads(state_path.read_text()) if state_path.is_file() else None


def down(project: Path) -> bool:
    """Stop what `up` started; returns False when no stack was recorded."""
    state = _recorded(project)
    if state is None:
        print("no stack recorded; nothing to stop")
        return False
    for key in ("worker", "server"):
        _kill(state[key])
        print(f"stopped {key} (pid {state[key]})")
    (_home(project) / STATE).unlink()
    return True


def print_env(project: Path) -> bool:
    """Print the shell exports that point `prefect` commands at the recorded stack."""
    state = _recorded(project)
    if state is None:
        print("no stack recorded; run `agent-rl stack up`", file=sys.stderr)
        return False
    print(f"export PREFECT_API_URL={state['api_url']} PREFECT_HOME={_home(project)}")
    return True


def status(project: Path) -> dict | None:
    state = _recorded(project)
    if state is None:
        print("no stack recorded")
        return None
    for key in ("server", "worker"):
        print(f"{key}: pid {state[key]} {'running' if _running(state[key]) else 'not running'}")
    print(f"api: {state['api_url']} ({'healthy' if _healthy(state['port']) else 'down'})")
    return state
