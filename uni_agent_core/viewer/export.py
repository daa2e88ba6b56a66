"""Step views written as files: `step-NNNNNN.html` beside each `step-NNNNNN.jsonl`.

The training run calls `write_step_views` on its trajectories directory before logging it to
MLflow, whose UI shows `.html` artifacts inline; `agent-rl view --out` writes one page.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from uni_agent_core.viewer.html import render_step_html
from uni_agent_core.viewer.steps import StepFile, list_steps, read_step


def step_view_name(step: int) -> str:
    """The file name of a step's page: `step-NNNNNN.html`."""
    return f"step-{step:06d}.html"


def write_step_view(
    step_file: StepFile, out: Path, *, run_name: str, trace_url: str | None = None
) -> Path:
    """Render one step file's page to `out` (written whole, then renamed into place).

    Raises:
        ViewerError: the step file is malformed, or `trace_url` is a bad template.
    """
    page = render_step_html(
        read_step(step_file.path), run_name=run_name, step=step_file.step, trace_url=trace_url
    )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    partial.write_text(page, encoding="utf-8")
    partial.replace(out)
    return out


def write_step_views(
    trajectories_dir: Path,
    *,
    run_name: str | None = None,
    trace_url: str | None = None,
    steps: Iterable[int] | None = None,
) -> list[Path]:
    """Write `step-NNNNNN.html` next to each step file of `trajectories_dir`.

    Args:
        trajectories_dir: a run's `trajectories/` directory.
        run_name: the pages' header (default: the name of the directory above).
        trace_url: trace link template with `{trace_id}` (`html.trace_url_template`); None: no
            trace links.
        steps: only these steps (default: every step file; pass the newest step to avoid
            re-rendering earlier pages each step).

    Returns:
        The pages written, by step (empty when the directory has no step files).

    Raises:
        ViewerError: a step file is malformed, or `trace_url` is a bad template.
    """
    trajectories_dir = Path(trajectories_dir)
    name = run_name or trajectories_dir.resolve().parent.name
    wanted = None if steps is None else set(steps)
    return [
        write_step_view(
            step_file,
            step_file.path.with_name(step_view_name(step_file.step)),
            run_name=name,
            trace_url=trace_url,
        )
        for step_file in list_steps(trajectories_dir)
        if wanted is None or step_file.step in wanted
    ]
