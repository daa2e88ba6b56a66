"""The step loop's dynamic sampling: flat groups replaced before a step trains."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.curriculum.task_sampler import EpochSampler
from uni_agent_core.rl.run import RunSummary
from uni_agent_core.rl.step_loop import StepLoop
from uni_agent_core.rl.trainer import StepOutcome
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec

ROOT = Path(__file__).resolve().parents[3]


class ScriptedDriver:
    """Groups whose rewards depend on the task: `flat-*` all 1, `mixed-*` alternate 1 and 0."""

    def __init__(self) -> None:
        self.on_episode = None
        self.launched: list[str] = []

    async def group(self, task, size, *, run_seed, step, group_id):
        self.launched.append(task.instance_id)
        flat = task.instance_id.startswith("flat")
        return [
            RolloutResult(
                task_id=task.instance_id,
                sample_index=i,
                reward=1.0 if flat else float(i % 2),
                exit_reason=ExitReason.SUBMITTED,
                group_id=group_id,
            )
            for i in range(size)
        ]


class RecordingTrainer:
    """Records the groups each step trains on; one version per step."""

    def __init__(self) -> None:
        self.version = 0
        self.trained: list[list[str]] = []

    def train_step(self, results):
        self.trained.append(sorted({r.task_id for r in results}))
        self.version += 1
        return StepOutcome(updated=True, metrics={"train/loss": 0.0})

    def engine_state(self):
        return {}


class NullEngine:
    async def update_weights(self, state, version) -> None:
        return None


def _run(tmp_path: Path, mode: str, refill: int, task_ids: list[str], steps: int):
    recipe = load_recipe(
        ROOT / "recipes" / "tiny-cpu.yaml",
        [
            f"trainer.mode={mode}",
            f"trainer.staleness.max_versions={0 if mode == 'sync' else 1}",
            "trainer.batch_size=2",
            "trainer.group_size=4",
            # one step more than run, so that no checkpoint is written (the model is a stand-in)
            f"trainer.total_steps={steps + 1}",
            "trainer.checkpoint_interval=100",
            f"curriculum.refill_flat_groups={refill}",
            "tracking.log_trajectories_per_step=0",
        ],
    )
    lines: list[str] = []
    run = SimpleNamespace(
        recipe=recipe,
        run_dir=tmp_path,
        checkpoint_dir=tmp_path / "checkpoints",
        seed=0,
        stop_after_steps=steps,
        tracker=None,
        history=None,
        tokenizer=None,
        echo=lines.append,
    )
    tasks = {t: TaskSpec(instance_id=t, problem_statement="p") for t in task_ids}
    driver, trainer = ScriptedDriver(), RecordingTrainer()
    summary = RunSummary(run_dir=tmp_path, start_step=0, steps=0)
    loop = StepLoop(
        run,  # type: ignore[arg-type]
        tasks,
        driver,  # type: ignore[arg-type]
        trainer,  # type: ignore[arg-type]
        NullEngine(),
        EpochSampler(task_ids, seed=0),
        [],
        summary,
        0,
    )
    # task order is the sampler's seeded permutation: replay fixes it for the test
    loop.replay = list(task_ids)
    asyncio.run(loop.run(0))
    return trainer, driver, summary, lines


@pytest.mark.parametrize("mode", ["sync", "colocated_async"])
def test_flat_groups_are_replaced_until_the_step_has_groups_with_a_signal(tmp_path, mode) -> None:
    task_ids = ["flat-a", "mixed-b", "flat-c", "mixed-d", "mixed-e", "mixed-f", "mixed-g"]
    trainer, driver, summary, lines = _run(tmp_path, mode, 2, task_ids, steps=1)
    assert trainer.trained == [["mixed-b", "mixed-d"]]
    assert driver.launched[:4] == ["flat-a", "mixed-b", "flat-c", "mixed-d"]
    row = summary.metrics[0]
    assert row["train/refilled_flat_groups"] == 2
    # the reward is the policy's over all it sampled: 8 flat ones, 8 episodes at one half
    assert row["train/reward_mean"] == pytest.approx(0.75)
    assert "refilled 2 flat groups" in lines[0]


def test_the_refill_budget_caps_replacements_per_step(tmp_path) -> None:
    task_ids = ["flat-a", "flat-b", "flat-c", "mixed-d", "mixed-e"]
    trainer, _, summary, _ = _run(tmp_path, "sync", 1, task_ids, steps=1)
    # one flat group replaced; the next flat one is trained on (the trainer drops it)
    assert trainer.trained == [["flat-b", "flat-c"]]
    assert summary.metrics[0]["train/refilled_flat_groups"] == 1


def test_without_a_refill_budget_flat_groups_reach_the_trainer(tmp_path) -> None:
    task_ids = ["flat-a", "mixed-b", "mixed-c", "mixed-d"]
    trainer, driver, summary, _ = _run(tmp_path, "sync", 0, task_ids, steps=1)
    assert trainer.trained == [["flat-a", "mixed-b"]]
    assert driver.launched == ["flat-a", "mixed-b"]
    assert summary.metrics[0]["train/refilled_flat_groups"] == 0
