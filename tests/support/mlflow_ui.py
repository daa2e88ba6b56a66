"""The real MLflow UI for browser tests: a server on loopback over a sqlite store, and a page
driver that reads a run's traces list and an opened trace's span tree.

`serve_mlflow_ui` starts `mlflow server` with one uvicorn worker and without MLflow's job
runner (it spawns three huey consumers with 25 threads between them, for judges and trace
rollups that viewing traces never needs), and tells LiteLLM to use its bundled model-cost map
instead of retrying a download from GitHub three times. Both halve the start-up on two cores
(about 8 s instead of 16 s). Spans live in the store's database, so the server needs no artifact
proxy for traces; artifact locations are fixed per experiment when it is created, and
`--default-artifact-root` only keeps experiments made through the UI out of the working
directory.

The driver goes through the UI's own URLs (MLflow 3.17):

- `#/experiments/<experiment>/runs/<run>/evaluations` is the run page's "Traces" tab: a table
  with a "Trace ID" column; its "Trace name" column is switched on through the "Columns" menu
  (MLflow keeps that choice per run in the browser's local storage), and a "<shown> of <total>"
  counter says how many traces the run has.
- `#/experiments/<experiment>/traces?selectedEvaluationId=<trace>` opens a trace in a dialog whose
  span tree names each span in an element with `data-testid="span-title-row-<span id>"`.

The SPA is slow on two cores, so every wait is explicit and long (`UI_TIMEOUT_MS`); a wait that
runs out raises `AssertionError` naming what was missing and where.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from playwright.sync_api import Locator, Page

UI_TIMEOUT_MS = 60_000
"""How long the driver waits for any one thing to show in the UI."""
SERVER_START_TIMEOUT_S = 60.0
"""How long `serve_mlflow_ui` waits for `/health` (it takes ~8 s on two idle cores)."""
SERVER_STOP_TIMEOUT_S = 10.0
"""How long the server gets to exit on SIGTERM before its process group is killed."""

SERVER_ENV = {
    # The job runner is for judges, scorers and trace rollups: viewing traces needs none of it.
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
    # Otherwise LiteLLM (imported by the AI gateway) retries a GitHub download at start-up.
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
}

# The UI opens its assistant panel and an "issues" tip on a fresh profile; they cover half of
# every screenshot. These are the UI's own local-storage switches for them.
_QUIET_UI_SCRIPT = """
try {
  localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');
  localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');
  localStorage.setItem('mlflow.detectIssues.guidanceShown_v1', 'true');
} catch (e) {}
"""
_QUIETED = "_agent_rl_mlflow_ui_quiet"
_COUNTER = re.compile(r"^\s*(\d+) of (\d+)\s*$")
_NO_TRACES = re.compile(r"^No traces found")
_SPAN_TITLES = '[data-testid^="span-title-row-"]'


class TraceRow(NamedTuple):
    """One row of a run's traces table, as the UI shows it."""

    trace_id: str
    name: str


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_mlflow_ui(
    backend_store_uri: str,
    artifact_root: Path,
    *,
    start_timeout_s: float = SERVER_START_TIMEOUT_S,
) -> Iterator[str]:
    """Runs `mlflow server` on a free loopback port and yields its base URL.

    Args:
        backend_store_uri: the store to show, e.g. `sqlite:////abs/path/mlruns.db`.
        artifact_root: `--default-artifact-root`, for experiments created through the UI; also
            the server's working directory, so nothing it writes lands in the caller's.
        start_timeout_s: how long to wait for the server to answer `/health`.

    Yields:
        The base URL, e.g. `http://127.0.0.1:41234` (no trailing slash).

    Raises:
        RuntimeError: the server exited or did not answer in time; the message ends with the
            tail of its log.
    """
    artifact_root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    command = [
        str(Path(sys.executable).with_name("mlflow")),
        "server",
        "--backend-store-uri",
        backend_store_uri,
        "--default-artifact-root",
        str(artifact_root),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    with tempfile.TemporaryFile(mode="w+", prefix="mlflow-server-", suffix=".log") as log:
        # Its own session, so stopping it reaches uvicorn, which `mlflow server` runs as a child.
        process = subprocess.Popen(
            command,
            cwd=artifact_root,
            env={**os.environ, **SERVER_ENV},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            _wait_until_up(process, base_url, start_timeout_s, log)
            yield base_url
        finally:
            _stop(process)


def _wait_until_up(
    process: subprocess.Popen[bytes], base_url: str, timeout_s: float, log: IO[str]
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise RuntimeError(
                f"mlflow server exited with {process.returncode} before answering at {base_url}"
                f"{_log_tail(log)}"
            )
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"mlflow server did not answer {base_url}/health within {timeout_s:.0f} s"
                f"{_log_tail(log)}"
            )
        time.sleep(0.25)


def _log_tail(log: IO[str], lines: int = 30) -> str:
    log.seek(0)
    tail = log.read().splitlines()[-lines:]
    return "\n--- mlflow server log (tail) ---\n" + "\n".join(tail)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL to what is left of it after a grace."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):  # then it is killed below with its group
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)
    # uvicorn, a child of `mlflow server`, may outlive it: the group is done only when it is.
    with suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def quiet_ui(page: Page) -> None:
    """Keeps the MLflow assistant panel and first-visit tips closed on every page `page` loads."""
    if not getattr(page, _QUIETED, False):
        page.add_init_script(_QUIET_UI_SCRIPT)
        setattr(page, _QUIETED, True)


def _load(page: Page, url: str) -> None:
    """A fresh load of `url`: from another UI address, `goto` would only change the hash, and
    the SPA could still show the previous run's rows or trace while it fetches the new one."""
    quiet_ui(page)
    page.goto("about:blank")
    page.goto(url)


def _settled_texts(locator: Locator, *, checks: int = 20, interval_ms: int = 250) -> list[str]:
    """The inner texts of `locator`'s matches once two reads `interval_ms` apart agree (the tree
    renders in one go in MLflow 3.17; this guards against a version that streams it in)."""
    page = locator.page
    texts = [text.strip() for text in locator.all_inner_texts()]
    for _ in range(checks):
        page.wait_for_timeout(interval_ms)
        again = [text.strip() for text in locator.all_inner_texts()]
        if again == texts:
            return texts
        texts = again
    return texts


def run_traces_url(base_url: str, experiment_id: str, run_id: str) -> str:
    """The run page's "Traces" tab."""
    return f"{base_url}/#/experiments/{experiment_id}/runs/{run_id}/evaluations"


def trace_url(base_url: str, experiment_id: str, trace_id: str) -> str:
    """The experiment's traces page with one trace opened."""
    return f"{base_url}/#/experiments/{experiment_id}/traces?selectedEvaluationId={trace_id}"


def open_run_traces(
    page: Page, base_url: str, experiment_id: str, run_id: str, *, timeout_ms: int = UI_TIMEOUT_MS
) -> list[TraceRow]:
    """Opens a run's "Traces" tab and returns the rows it lists, newest first.

    The table loads the newest 100 traces and renders only the rows that fit on screen, so for
    a run with more traces this is the first screenful; `listed_trace_count` gives the total.

    Args:
        page: a page of a browser that can reach `base_url`.
        base_url: the MLflow server, e.g. `http://127.0.0.1:5000`.
        experiment_id: the run's experiment.
        run_id: the run whose traces (metadata `mlflow.sourceRun`) to list.
        timeout_ms: how long to wait for each thing to show.

    Returns:
        One `TraceRow` (trace id, trace name) per row shown; empty when the run has no traces.

    Raises:
        AssertionError: the tab, its table or its columns did not show within `timeout_ms`.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    url = run_traces_url(base_url, experiment_id, run_id)
    _load(page, url)
    rows = page.get_by_role("row").filter(has=page.get_by_role("cell"))
    empty = page.get_by_text(_NO_TRACES)
    try:
        rows.first.or_(empty).first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeoutError as error:
        raise AssertionError(
            f"{url}: the run's traces table showed neither rows nor {_NO_TRACES.pattern!r} "
            f"within {timeout_ms / 1000:.0f} s; is the run id right and the server up?"
        ) from error
    if not rows.count():
        return []
    columns = _show_column(page, "Trace name", url, timeout_ms)
    id_column, name_column = columns.index("Trace ID"), columns.index("Trace name")
    listed = []
    for row in rows.all():
        cells = [text.strip() for text in row.get_by_role("cell").all_inner_texts()]
        listed.append(TraceRow(trace_id=cells[id_column], name=cells[name_column]))
    return listed


def listed_trace_count(page: Page, *, timeout_ms: int = UI_TIMEOUT_MS) -> int:
    """How many traces the open traces table says there are in all (its "<shown> of <total>")."""
    return _wait_for_count(page, page.url, timeout_ms)[1]


def _wait_for_count(page: Page, url: str, timeout_ms: int) -> tuple[int, int]:
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    counter = page.get_by_text(_COUNTER)
    try:
        counter.first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeoutError as error:
        raise AssertionError(
            f"{url}: no traces table (its '<shown> of <total>' counter) within "
            f"{timeout_ms / 1000:.0f} s; is the run id right and the server up?"
        ) from error
    match = _COUNTER.match(counter.first.inner_text())
    assert match, f"{url}: unreadable trace counter {counter.first.inner_text()!r}"
    return int(match[1]), int(match[2])


def _column_headers(page: Page) -> list[str]:
    """The traces table's column titles, in the order of the cells of its rows."""
    trace_id_header = page.get_by_role("columnheader", name="Trace ID")
    header_row = page.get_by_role("row").filter(has=trace_id_header)
    return [text.strip() for text in header_row.first.get_by_role("columnheader").all_inner_texts()]


def _show_column(page: Page, column: str, url: str, timeout_ms: int) -> list[str]:
    """Switches a column of the traces table on through its "Columns" menu if it is off, and
    returns the column titles then shown. (The menu toggles: it is opened only when needed.)"""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    columns = _column_headers(page)
    if column in columns:
        return columns
    try:
        page.get_by_role("button", name="Columns").click(timeout=timeout_ms)
        page.get_by_role("option", name=column, exact=True).click(timeout=timeout_ms)
        page.keyboard.press("Escape")
        page.get_by_role("columnheader", name=column).first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeoutError as error:
        raise AssertionError(
            f"{url}: could not show the {column!r} column through the 'Columns' menu"
        ) from error
    columns = _column_headers(page)
    assert column in columns, f"{url}: no {column!r} among the traces columns {columns}"
    return columns


def open_trace(
    page: Page,
    base_url: str,
    experiment_id: str,
    trace_id: str,
    *,
    timeout_ms: int = UI_TIMEOUT_MS,
) -> list[str]:
    """Opens one trace and returns the span names of its span tree, in tree order.

    Args:
        page: a page of a browser that can reach `base_url`.
        base_url: the MLflow server.
        experiment_id: the trace's experiment.
        trace_id: e.g. `tr-80cc87df8fb8f88dcf9b6fb11c2a1a22`.
        timeout_ms: how long to wait for the trace to show.

    Returns:
        The root span's name, then its descendants' (as expanded on opening: all of them for
        a root with children only).

    Raises:
        AssertionError: no trace dialog, or one without spans, showed within `timeout_ms`.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    url = trace_url(base_url, experiment_id, trace_id)
    _load(page, url)
    # Not the dialog's header: it shows the trace's id and status only for a trace on the
    # list's current page, and a fresh load leaves no other trace's tree to mistake for this.
    titles = trace_dialog(page).locator(_SPAN_TITLES)
    try:
        titles.first.wait_for(timeout=timeout_ms)
    except PlaywrightTimeoutError as error:
        raise AssertionError(
            f"{url}: trace {trace_id} did not open with a span tree within "
            f"{timeout_ms / 1000:.0f} s (is it in experiment {experiment_id}?)"
        ) from error
    return _settled_texts(titles)


def trace_dialog(page: Page) -> Locator:
    """The dialog showing the opened trace (its span tree and the selected span)."""
    return page.get_by_role("dialog").filter(has=page.get_by_text("Spans", exact=True))
