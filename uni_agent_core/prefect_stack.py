"""`agent-rl stack up | down | status`: a local Prefect stack for a fresh machine, on loopback.

`up` starts a Prefect server on 127.0.0.1 with its home (sqlite database, settings) under
`<project>/.prefect`, waits for its health endpoint, creates the `cpu` process work pool, deploys
every deployment of `prefect.yaml`, and starts a worker on the pool; the pids and the API URL go
to `.prefect/stack.json`. `down` stops exactly those processes (by pid, process group). Only the
`prefect` command line is used, so `uni_agent_core` still never imports prefect.
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
_ENV_OFF = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false"}


def _home(project: Path) -> Path:
    return project / ".prefect"


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
    """Start server, pool, deployments and worker; returns the recorded state."""
    home = _home(project)
    home.mkdir(parents=True, exist_ok=True)
    state_path = home / STATE
    if state_path.is_file() and _alive(json.loads(state_path.read_text())):
        raise RuntimeError(f"a stack is already up ({state_path}); run `agent-rl stack down`")
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
    pools = subprocess.run(
        [_prefect(), "work-pool", "ls"], env=env, capture_output=True, text=True, check=True
    )
    if " cpu " not in pools.stdout:
        subprocess.run(
            [_prefect(), "work-pool", "create", "cpu", "--type", "process"],
            env=env,
            check=True,
            capture_output=True,
        )
    subprocess.run(
        [_prefect(), "--no-prompt", "deploy", "--all"],
        env=env,
        check=True,
        cwd=project,
        capture_output=True,
    )
    print("deployed: agent-rl/train, curriculum-refresh/nightly (work pool cpu)")
    worker = _spawn([_prefect(), "worker", "start", "--pool", "cpu"], env, home / "worker.log")
    print(f"worker on pool cpu: pid {worker} (log {home / 'worker.log'})")
    state = {"port": port, "api_url": env["PREFECT_API_URL"], "server": server, "worker": worker}
    state_path.write_text(json.dumps(state, indent=2) + "\n")
    print(f"export PREFECT_API_URL={env['PREFECT_API_URL']} PREFECT_HOME={home}")
    return state


def _alive(state: dict) -> bool:
    return any(_running(state.get(key)) for key in ("server", "worker"))


def _running(pid: int | None) -> bool:
    if not pid:
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


def down(project: Path) -> bool:
    """Stop what `up` started; returns False when no stack was recorded."""
    state_path = _home(project) / STATE
    if not state_path.is_file():
        print("no stack recorded; nothing to stop")
        return False
    state = json.loads(state_path.read_text())
    for key in ("worker", "server"):
        _kill(state[key])
        print(f"stopped {key} (pid {state[key]})")
    state_path.unlink()
    return True


def status(project: Path) -> dict | None:
    state_path = _home(project) / STATE
    if not state_path.is_file():
        print("no stack recorded")
        return None
    state = json.loads(state_path.read_text())
    for key in ("server", "worker"):
        print(f"{key}: pid {state[key]} {'running' if _running(state[key]) else 'not running'}")
    print(f"api: {state['api_url']} ({'healthy' if _healthy(state['port']) else 'down'})")
    return state
