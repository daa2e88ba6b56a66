"""Evaluation reports: `report.json` and `report.md` (overall, per level, exit reasons)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from uni_agent_core.eval.metrics import EvalSummary


def eval_metrics(summary: EvalSummary) -> dict[str, float]:
    """The summary as `eval/...` metrics (MLflow names)."""
    k = summary.k
    metrics = {
        "eval/pass@1": summary.pass_at_1,
        f"eval/avg@{k}": summary.avg_at_k,
        f"eval/pass@{k}": summary.pass_at_k,
        "eval/tasks": float(summary.tasks),
        "eval/samples": float(summary.samples),
        "eval/leak_flagged": float(summary.leak_flagged),
    }
    for level, scores in summary.by_level.items():
        metrics[f"eval/{level}/pass@1"] = scores["pass@1"]
    for name, scores in summary.by_harness.items():
        metrics[f"eval/harness/{name}/pass@1"] = scores["pass@1"]
        metrics[f"eval/harness/{name}/avg@{k}"] = scores[f"avg@{k}"]
    for name, scores in summary.by_task_env.items():
        metrics[f"eval/task_env/{name}/pass@1"] = scores["pass@1"]
        metrics[f"eval/task_env/{name}/avg@{k}"] = scores[f"avg@{k}"]
    for reason, count in summary.exit_reasons.items():
        # a share of the samples; times `eval/samples` it is the count
        metrics[f"eval/exit/{reason}"] = count / summary.samples
    return metrics


def render_markdown(summary: EvalSummary, spec: dict[str, Any], seconds: float) -> str:
    k = summary.k
    checkpoint = spec.get("checkpoint") or f"base policy {spec.get('policy')}"
    mode = " (oracle: gold patches)" if spec.get("oracle") else ""
    lines = [
        f"# Evaluation: {spec.get('suite')}{mode}",
        "",
        f"{checkpoint}; {summary.tasks} tasks x {k} samples = {summary.samples} samples "
        f"(this invocation {seconds:.1f} s).",
        "",
        f"| | pass@1 | pass@{k} | avg@{k} |",
        "|---|---|---|---|",
        f"| all | {summary.pass_at_1:.3f} | {summary.pass_at_k:.3f} | {summary.avg_at_k:.3f} |",
        *[
            f"| {level} ({int(s['tasks'])} tasks) | {s['pass@1']:.3f} | {s[f'pass@{k}']:.3f} | "
            f"{s[f'avg@{k}']:.3f} |"
            for level, s in summary.by_level.items()
        ],
        *[
            f"| harness {name} ({int(s['tasks'])} tasks) | {s['pass@1']:.3f} | "
            f"{s[f'pass@{k}']:.3f} | {s[f'avg@{k}']:.3f} |"
            for name, s in summary.by_harness.items()
        ],
        *[
            f"| {name} tasks ({int(s['tasks'])}) | {s['pass@1']:.3f} | "
            f"{s[f'pass@{k}']:.3f} | {s[f'avg@{k}']:.3f} |"
            for name, s in summary.by_task_env.items()
            if len(summary.by_task_env) > 1
        ],
        "",
        "| exit reason | samples |",
        "|---|---|",
        *[f"| {reason} | {count} |" for reason, count in sorted(summary.exit_reasons.items())],
        "",
        f"Leak-flagged samples: {summary.leak_flagged}.",
    ]
    return "\n".join(lines) + "\n"


def write_report(summary: EvalSummary, out_dir: Path, spec: dict[str, Any], seconds: float) -> Path:
    """`report.json` and `report.md` under `out_dir`; returns the JSON path."""
    target = out_dir / "report.json"
    payload = {"spec": spec, "summary": summary.model_dump(), "metrics": eval_metrics(summary)}
    target.write_text(json.dumps(payload, indent=2) + "\n")
    (out_dir / "report.md").write_text(render_markdown(summary, spec, seconds))
    return target
