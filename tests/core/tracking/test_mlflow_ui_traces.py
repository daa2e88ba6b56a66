"""In a real browser, the MLflow UI served on loopback lists a run's episode traces and opens one
with its spans: the driver of `support.mlflow_ui` against a store written with MLflow's tracing
API the way training writes it. Skipped without Chromium; screenshots go to test-artifacts/."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import mlflow
import pytest
from mlflow.entities import SpanType
from support.mlflow_ui import listed_trace_count, open_run_traces, open_trace, serve_mlflow_ui

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytestmark = pytest.mark.slow

CHILDREN = ("model call 1", "tool bash", "verifier")
_CHILD_TYPES = (SpanType.CHAT_MODEL, SpanType.TOOL, SpanType.EVALUATOR)
_S = 1_000_000_000


@dataclass(frozen=True)
class Store:
    uri: str
    artifact_root: Path
    experiment_id: str
    run_id: str
    traces: dict[str, str]
    """Trace id -> root span name."""


def write_store(root: Path) -> Store:
    """A sqlite store with one finished run and two episode traces linked to it, each a root
    span with the three children training writes (model call, tool, verifier)."""
    uri = f"sqlite:///{root / 'mlruns.db'}"
    artifact_root = root / "artifacts"
    previous = os.environ.get("MLFLOW_TRACKING_URI")
    mlflow.set_tracking_uri(uri)  # the tracing API writes to the global tracking URI
    try:
        client = mlflow.MlflowClient(uri)
        experiment_id = client.create_experiment(
            "ui-traces", artifact_location=artifact_root.as_uri()
        )
        run_id = client.create_run(experiment_id, run_name="train").info.run_id
        traces = {}
        start = time.time_ns() - 60 * _S
        for k, task in enumerate(("fix-parser", "add-cache")):
            t0 = start + k * 10 * _S
            root_span = mlflow.start_span_no_context(
                f"episode {task}#{k}",
                span_type=SpanType.AGENT,
                inputs={"task": task},
                metadata={"mlflow.sourceRun": run_id},
                experiment_id=experiment_id,
                start_time_ns=t0,
            )
            for i, (name, span_type) in enumerate(zip(CHILDREN, _CHILD_TYPES, strict=True)):
                child = mlflow.start_span_no_context(
                    name, span_type=span_type, parent_span=root_span, start_time_ns=t0 + i * _S
                )
                child.end(end_time_ns=t0 + i * _S + _S // 2)
            root_span.set_outputs({"reward": float(k)})
            root_span.end(end_time_ns=t0 + 4 * _S)
            traces[root_span.trace_id] = root_span.name
        mlflow.flush_trace_async_logging()
        client.set_terminated(run_id)
    finally:
        mlflow.set_tracking_uri(previous)  # None: back to MLflow's default
    # The tracing API logs and drops what it cannot write: check the store holds every span.
    written = client.search_traces(locations=[experiment_id])
    assert {t.info.trace_id: [s.name for s in t.data.spans] for t in written} == {
        trace_id: [name, *CHILDREN] for trace_id, name in traces.items()
    }
    assert {t.info.trace_metadata["mlflow.sourceRun"] for t in written} == {run_id}
    return Store(uri, artifact_root, experiment_id, run_id, traces)


def test_ui_lists_the_runs_traces_and_opens_one_with_its_spans(
    tmp_path: Path, chromium_page: Page, screenshot: Callable[[Page, str], Path]
) -> None:
    store = write_store(tmp_path)
    with serve_mlflow_ui(store.uri, store.artifact_root) as base_url:
        rows = open_run_traces(chromium_page, base_url, store.experiment_id, store.run_id)
        screenshot(chromium_page, "mlflow-ui-driver-traces-list")
        assert {(row.trace_id, row.name) for row in rows} == set(store.traces.items())
        assert len(rows) == listed_trace_count(chromium_page) == 2

        trace_id = rows[0].trace_id
        spans = open_trace(chromium_page, base_url, store.experiment_id, trace_id)
        screenshot(chromium_page, "mlflow-ui-driver-trace-spans")
        assert spans == [store.traces[trace_id], *CHILDREN]
