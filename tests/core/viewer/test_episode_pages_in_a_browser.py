"""Reading a real run's episodes in a real browser (Debian's Chromium): after
`agent-rl train --recipe recipes/ci-smoke.yaml`, the MLflow UI lists the run's traces and opens
one with its spans, and `agent-rl view` renders each step with as many chains and trained-token
spans as the step files hold; an episode whose harness rewrote its latest action shows the
rolled-back action. Screenshots go to `test-artifacts/screenshots/` (`docs/viewer.md` shows
them). Skipped without Chromium."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from support.browser import launch_chromium, require_browser, save_screenshot
from support.mlflow_ui import free_port, open_run_traces, open_trace, serve_mlflow_ui
from support.tasks import micro_swe_tasks

from uni_agent_core.config import load_recipe
from uni_agent_core.config.harness import BlackboxHarnessConfig
from uni_agent_core.rl.samples import write_samples
from uni_agent_core.rollout.stack import rollout_stack
from uni_agent_core.viewer.export import write_step_views

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
AGENT_RL = str(Path(sys.executable).parent / "agent-rl")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A ci-smoke run trained by the command line into its own directory and MLflow store."""
    require_browser()
    work = tmp_path_factory.mktemp("ci-smoke")
    store = f"sqlite:///{work}/mlruns.db"
    done = subprocess.run(
        [
            AGENT_RL,
            "train",
            "--recipe",
            str(ROOT / "recipes" / "ci-smoke.yaml"),
            "--run-dir",
            str(work / "run"),
            "--set",
            f"tracking.tracking_uri={store}",
        ],
        cwd=work,  # the store's artifact root (./mlruns) lands here
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    client = mlflow.MlflowClient(tracking_uri=store)
    experiment = client.get_experiment_by_name("agent-rl-ci")
    (run,) = client.search_runs([experiment.experiment_id])
    return {
        "work": work,
        "store": store,
        "run_dir": work / "run",
        "experiment_id": experiment.experiment_id,
        "run_id": run.info.run_id,
    }


def stored_traces(store: str, experiment_id: str, run_id: str) -> list:
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(store)
    try:
        return mlflow.search_traces(locations=[experiment_id], run_id=run_id, return_type="list")
    finally:
        mlflow.set_tracking_uri(previous)


def test_the_mlflow_ui_lists_the_runs_traces_and_opens_one(trained) -> None:
    traces = stored_traces(trained["store"], trained["experiment_id"], trained["run_id"])
    # ci-smoke: 2 steps x 4 episodes (`sample 4` traces each), and the 2 held-out episodes of
    # the checkpoint's evaluation, which `agent-rl train` traces into the training run
    assert len(traces) == 8 + 2
    with (
        serve_mlflow_ui(trained["store"], trained["work"] / "ui-artifacts") as ui,
        launch_chromium() as context,
    ):
        page = context.new_page()
        page.set_viewport_size({"width": 1500, "height": 900})
        rows = open_run_traces(page, ui, trained["experiment_id"], trained["run_id"])
        save_screenshot(page, "mlflow-traces-list")
        assert {row.trace_id for row in rows} == {trace.info.trace_id for trace in traces}
        assert all(row.name.startswith("episode micro-swe__") for row in rows)
        spans = open_trace(page, ui, trained["experiment_id"], rows[0].trace_id)
        save_screenshot(page, "mlflow-trace-spans")
    root, *children = spans
    assert root == rows[0].name
    assert children[0] == "model call 0 (new chain 0)"
    assert children[-1] == "verifier"
    stored = next(t for t in traces if t.info.trace_id == rows[0].trace_id)
    assert [span.name for span in stored.data.spans] == spans


def test_agent_rl_view_renders_the_steps_chains_and_trained_spans(trained) -> None:
    trajectories = trained["run_dir"] / "trajectories"
    view = subprocess.Popen(
        [AGENT_RL, "view", trained["run_id"], "--tracking-uri", trained["store"]]
        + ["--port", str(port := free_port())],
        cwd=trained["work"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        said = ""
        while f"http://127.0.0.1:{port}" not in said:  # MLflow may log lines before it
            line = view.stdout.readline()
            assert line, f"agent-rl view ended without serving: {said}"
            said += line
        with launch_chromium() as context:
            page = context.new_page()
            page.set_viewport_size({"width": 1400, "height": 1000})
            for step in (1, 2):
                rows = [
                    json.loads(line)
                    for line in (trajectories / f"step-{step:06d}.jsonl").read_text().splitlines()
                ]
                page.goto(f"http://127.0.0.1:{port}/step/{step}")
                chains = page.locator(".chain")
                assert chains.count() == len(rows)
                for i, row in enumerate(rows):
                    trained_segments = sum(s["trainable"] for s in row["segments"])
                    assert chains.nth(i).locator(".trained-span").count() == trained_segments
                episodes = {(r["task_id"], r["sample_index"]): r["trace_id"] for r in rows}
                assert page.locator("tr.episode-row").count() == len(episodes)
                links = page.locator("a.trace-link")
                hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
                experiment = f"http://127.0.0.1:5000/#/experiments/{trained['experiment_id']}"
                assert set(hrefs) == {  # from the episodes' table and their sections
                    f"{experiment}/traces?selectedEvaluationId={trace_id}"
                    for trace_id in episodes.values()
                }
                if step == 1:
                    page.locator(".tok.trained").first.hover()
                    save_screenshot(page, "view-step")
    finally:
        view.terminate()
        view.wait(timeout=30)


ROLLBACK_AGENT = """
import json, os, pathlib, urllib.request

def chat(messages):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps({"model": os.environ["OPENAI_MODEL"], "messages": messages,
                         "max_tokens": 24}).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]["content"]

messages = [{"role": "user", "content": pathlib.Path(os.environ["AGENT_RL_TASK_FILE"]).read_text()}]
messages += [{"role": "assistant", "content": chat(messages)}, {"role": "user", "content": "go on"}]
chat(messages)
# The harness rewrites the model's latest action (as one that repairs a malformed call would):
messages += [{"role": "assistant", "content": "Let me read the tests first."},
             {"role": "user", "content": "go on"}]
chat(messages)
"""


def test_a_rolled_back_action_is_marked_in_the_view(tmp_path) -> None:
    require_browser()
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml")
    recipe.harness = BlackboxHarnessConfig(command=[sys.executable, "-c", ROLLBACK_AGENT])
    (task,) = micro_swe_tasks(tmp_path / "data", n=1)

    async def episode():
        async with rollout_stack(recipe, max_concurrency=1) as stack:
            result = await stack.driver.episode(task, 0, seed=7)
            return result, stack.manager.codec.tokenizer

    result, tokenizer = asyncio.run(episode())
    assert [call.continuation for call in result.calls] == ["new", "append", "rollback"]
    trajectories = tmp_path / "run" / "trajectories"
    write_samples([result], 1, trajectories, 1, tokenizer)
    (page_file,) = write_step_views(trajectories)
    with launch_chromium() as context:
        page = context.new_page()
        page.set_viewport_size({"width": 1400, "height": 900})
        page.goto(page_file.as_uri())
        marker = page.locator(".chain .rollback")
        assert marker.count() == 1
        dropped = tokenizer.decode(result.calls[1].dropped_ids)
        assert marker.locator("del").text_content() == dropped
        assert f"rolled back ({len(result.calls[1].dropped_ids)} tokens)" in marker.text_content()
        marker.scroll_into_view_if_needed()
        save_screenshot(page, "view-rollback")
