"""Benchmark how much the episode traces add to the MLflow store of a training run.

    python bench/trace_store.py [--recipe recipes/smollm2-cpu.yaml] [--steps 10]
                                [--traces "sample 4"]

Trains the recipe for `--steps` steps with `agent-rl train` (evaluation off) into a fresh
directory and a fresh sqlite MLflow store, under the recipe's `tracking.traces` or `--traces`.
Then the store is measured twice in the same run: as the run left it, and as a copy with every
trace deleted and both copies vacuumed (the baseline: the same run's params, metrics and tags
without traces).
Printed: traces, spans, the trace store's bytes (the difference) per 10 steps against the
issue's 5 MB target, and the size of the step files and views logged as artifacts.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_MB_PER_10_STEPS = 5.0


def vacuumed_size(db: Path) -> int:
    with sqlite3.connect(db) as connection:
        connection.execute("VACUUM")
    return db.stat().st_size


def without_traces(db: Path, copy: Path) -> int:
    """The vacuumed size of a copy of `db` with every trace deleted."""
    import mlflow

    shutil.copy(db, copy)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{copy}")
    for experiment in client.search_experiments():
        client.delete_traces(
            experiment.experiment_id, max_timestamp_millis=int(time.time() * 1000) + 60_000
        )
    return vacuumed_size(copy)


def count(tracking_uri: str) -> tuple[int, int]:
    import mlflow

    mlflow.set_tracking_uri(tracking_uri)  # search_traces reads the global URI
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    traces = mlflow.search_traces(locations=ids, return_type="list", max_results=100_000)
    return len(traces), sum(len(trace.data.spans) for trace in traces)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recipe", default="recipes/smollm2-cpu.yaml")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--traces", default=None, help="tracking.traces (default: the recipe's)")
    parser.add_argument("--keep", action="store_true", help="keep the run directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="agent-rl-trace-store-"))
    db = work / "mlruns.db"
    tracking_uri = f"sqlite:///{db}"
    command = [
        str(Path(sys.executable).parent / "agent-rl"),
        "train",
        "--recipe",
        str((ROOT / args.recipe).resolve()),
        "--run-dir",
        str(work / "run"),
        "--set",
        f"trainer.total_steps={args.steps}",
        "--set",
        f"tracking.tracking_uri={tracking_uri}",
        "--set",
        "trainer.resume=never",
        # the training episodes' traces alone: the pipeline's evaluations trace theirs too
        "--set",
        "eval.enabled=false",
    ]
    if args.traces is not None:
        command += ["--set", f"tracking.traces={args.traces}"]
    print("+", " ".join(command), flush=True)
    started = time.perf_counter()
    subprocess.run(command, cwd=work, check=True)
    minutes = (time.perf_counter() - started) / 60

    traces, spans = count(tracking_uri)
    with_traces = vacuumed_size(db)
    baseline = without_traces(db, work / "baseline.db")
    trace_bytes = with_traces - baseline
    per_10 = trace_bytes / args.steps * 10 / 1e6
    steps_dir = work / "run" / "trajectories"
    jsonl = sum(p.stat().st_size for p in steps_dir.glob("*.jsonl"))
    html = sum(p.stat().st_size for p in steps_dir.glob("*.html"))

    rows = [
        ("recipe", args.recipe),
        ("steps trained", f"{args.steps} ({minutes:.1f} min)"),
        ("traces / spans", f"{traces} / {spans}"),
        ("store with traces (vacuumed)", f"{with_traces / 1e6:.2f} MB"),
        ("store without traces (baseline)", f"{baseline / 1e6:.2f} MB"),
        (
            "trace store",
            f"{trace_bytes / 1e6:.2f} MB ({trace_bytes / max(traces, 1) / 1e3:.0f} KB a trace)",
        ),
        (
            "trace store per 10 steps",
            f"{per_10:.2f} MB (target < {TARGET_MB_PER_10_STEPS:g} MB: "
            f"{'met' if per_10 < TARGET_MB_PER_10_STEPS else 'NOT met'})",
        ),
        ("ratio to baseline store", f"{with_traces / baseline:.2f}x"),
        ("step files / views (artifacts)", f"{jsonl / 1e6:.2f} MB / {html / 1e6:.2f} MB"),
    ]
    width = max(len(name) for name, _ in rows)
    print(f"\n| {'measure'.ljust(width)} | value |\n|{'-' * (width + 2)}|-------|")
    for name, value in rows:
        print(f"| {name.ljust(width)} | {value} |")
    if args.keep:
        print(f"\nkept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
