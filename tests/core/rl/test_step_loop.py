"""The step loop on its own: a fake driver, a recording trainer, `ScriptedEngine` taking the
weights. Dynamic sampling (flat groups replaced before a step trains), async launch-ahead within
the staleness bound, stale groups dropped, and the resume cursor (groups launched but not
trained come back first)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.curriculum.task_sampler import EpochSampler
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.models import load_policy
from uni_agent_core.rl.step_loop import StepLoop
from uni_agent_core.rl.step_records import Checkpointer, RunSummary, StepRecorder
from uni_agent_core.rl.trainer import StepOutcome
from uni_agent_core.types import ExitReason, RolloutResult, TaskSpec, Trajectory

ROOT = Path(__file__).resolve().parents[3]


def _sampled_at(version: int) -> Trajectory:
    return Trajectory(
        session_id="s",
        chain_id=0,
        prompt_ids=[1],
        response_ids=[2],
        loss_mask=[1],
        logprobs=[-0.5],
        policy_versions=[version],
    )


class ScriptedDriver:
    """Groups whose rewards depend on the task: `flat-*` all 1, `mixed-*` alternate 1 and 0;
    every episode is sampled at the engine's current version."""

    def __init__(self, engine: ScriptedEngine) -> None:
        self.engine = engine
        self.launched: list[str] = []
        self.observed: list[str] = []

    async def group(self, task, size, *, run_seed, step, group_id, on_episode=None):
        self.launched.append(task.instance_id)
        flat = task.instance_id.startswith("flat")
        results = [
            RolloutResult(
                task_id=task.instance_id,
                sample_index=i,
                reward=1.0 if flat else float(i % 2),
                exit_reason=ExitReason.SUBMITTED,
                group_id=group_id,
                trajectories=[_sampled_at(self.engine.version)],
            )
            for i in range(size)
        ]
        await asyncio.sleep(0)
        for result in results:
            self.observed.append(result.task_id)
            if on_episode is not None:
                on_episode(result)
        return results


class RecordingTrainer:
    """Records the groups each step trains on; one version per step."""

    def __init__(self) -> None:
        self.version = 0
        self.trained: list[list[str]] = []
        self.model = self.optimizer = None

    def train_step(self, results):
        self.trained.append(sorted({r.task_id for r in results}))
        self.version += 1
        return StepOutcome(updated=True, metrics={"train/loss": 0.0})

    def engine_state(self):
        return {}


class RecordingCheckpointer(Checkpointer):
    """Keeps what each checkpoint would hold instead of writing model weights."""

    def __init__(self, **kw) -> None:
        super().__init__(Path("unused"), keep=1, run_name="test", **kw)
        self.saved: list[dict] = []

    def save(self, step, **state):  # type: ignore[override]
        self.saved.append({"step": step, **{k: v for k, v in state.items() if k != "model"}})
        return Path("unused")


def _run(
    tmp_path: Path,
    mode: str,
    refill: int,
    task_ids: list[str],
    steps: int,
    *,
    bound: int | None = None,
    policy: str = "wait",
    pending: list[str] | None = None,
    checkpoint_interval: int = 100,
    deadline: float | None = None,
    total_steps: int | None = None,
):
    bound = (0 if mode == "sync" else 1) if bound is None else bound
    recipe = load_recipe(
        ROOT / "recipes" / "tiny-cpu.yaml",
        [
            f"trainer.mode={mode}",
            f"trainer.staleness.max_versions={bound}",
            f"trainer.staleness.policy={policy}",
            "trainer.batch_size=2",
            "trainer.group_size=4",
            f"trainer.total_steps={total_steps or steps + 1}",
        ],
    )
    config = recipe.trainer
    lines: list[str] = []
    engine = ScriptedEngine(load_policy("tiny")[1])
    driver, trainer = ScriptedDriver(engine), RecordingTrainer()
    summary = RunSummary(run_dir=tmp_path, start_step=0, steps=0)
    sampler = EpochSampler(task_ids, seed=0)
    sampler._order = list(task_ids)  # the seeded permutation, fixed for the test
    checkpointer = RecordingCheckpointer(
        interval=checkpoint_interval, total_steps=config.total_steps
    )
    loop = StepLoop(
        config,
        tasks={t: TaskSpec(instance_id=t, problem_statement="p") for t in task_ids},
        driver=driver,  # type: ignore[arg-type]
        trainer=trainer,  # type: ignore[arg-type]
        engine=engine,
        sampler=sampler,
        recorder=StepRecorder(tmp_path, summary, total_steps=config.total_steps, echo=lines.append),
        checkpointer=checkpointer,
        seed=0,
        refill_flat_groups=refill,
        pending=pending or [],
        stop_after_steps=steps,
        deadline=deadline,
    )
    asyncio.run(loop.run(0))
    summary.stopped_at_deadline = loop.stopped_at_deadline
    return trainer, driver, summary, lines, checkpointer, engine


@pytest.mark.parametrize("mode", ["sync", "colocated_async"])
def test_flat_groups_are_replaced_until_the_step_has_groups_with_a_signal(tmp_path, mode) -> None:
    task_ids = ["flat-a", "mixed-b", "flat-c", "mixed-d", "mixed-e", "mixed-f", "mixed-g"]
    trainer, driver, summary, lines, *_ = _run(tmp_path, mode, 2, task_ids, steps=1)
    assert trainer.trained == [["mixed-b", "mixed-d"]]
    assert driver.launched[:4] == ["flat-a", "mixed-b", "flat-c", "mixed-d"]
    row = summary.metrics[0]
    assert row["train/refilled_flat_groups"] == 2
    # the reward is the policy's over all it sampled: 8 flat ones, 8 episodes at one half
    assert row["train/reward_mean"] == pytest.approx(0.75)
    assert "refilled 2 flat groups" in lines[0]


def test_the_refill_budget_caps_replacements_per_step(tmp_path) -> None:
    task_ids = ["flat-a", "flat-b", "flat-c", "mixed-d", "mixed-e"]
    trainer, _, summary, *_ = _run(tmp_path, "sync", 1, task_ids, steps=1)
    # one flat group replaced; the next flat one is trained on (the trainer drops it)
    assert trainer.trained == [["flat-b", "flat-c"]]
    assert summary.metrics[0]["train/refilled_flat_groups"] == 1


def test_without_a_refill_budget_flat_groups_reach_the_trainer(tmp_path) -> None:
    task_ids = ["flat-a", "mixed-b", "mixed-c", "mixed-d"]
    trainer, driver, summary, *_ = _run(tmp_path, "sync", 0, task_ids, steps=1)
    assert trainer.trained == [["flat-a", "mixed-b"]]
    assert driver.launched == ["flat-a", "mixed-b"]
    assert summary.metrics[0]["train/refilled_flat_groups"] == 0


def test_async_launches_ahead_within_the_staleness_bound(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, driver, _, _, _, engine = _run(tmp_path, "colocated_async", 0, task_ids, steps=1)
    # bound 1, `wait`: by step 0, (0 + 1 + 1) x 2 groups may run; the step trains the first two
    assert driver.launched == task_ids[:4]
    assert trainer.trained == [["mixed-0", "mixed-1"]]
    assert engine.version == 1  # the update reached the engine


def test_async_launches_nothing_for_steps_past_the_last(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, driver, *_ = _run(tmp_path, "colocated_async", 0, task_ids, steps=2, total_steps=2)
    assert driver.launched == task_ids[:4]
    assert trainer.trained == [["mixed-0", "mixed-1"], ["mixed-2", "mixed-3"]]


def test_sync_launches_exactly_one_batch_per_step(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, driver, *_ = _run(tmp_path, "sync", 0, task_ids, steps=2)
    assert driver.launched == task_ids[:4]
    assert trainer.trained == [["mixed-0", "mixed-1"], ["mixed-2", "mixed-3"]]


def test_groups_older_than_the_bound_are_dropped(tmp_path) -> None:
    task_ids = [f"mixed-{i:02d}" for i in range(14)]
    trainer, driver, summary, *_ = _run(
        tmp_path, "colocated_async", 0, task_ids, steps=3, bound=1, policy="drop"
    )
    # `drop` looks one batch further ahead: by step 0, (0 + 1 + 2) x 2 groups run at version 0;
    # at step 2 the trainer is at version 2, so groups 4 and 5 (version 0) are too old and are
    # dropped, and the step trains groups 6 and 7 (sampled at version 1) instead
    assert driver.launched[:6] == task_ids[:6]
    assert trainer.trained[:2] == [task_ids[0:2], task_ids[2:4]]
    assert summary.metrics[2]["train/dropped_stale_groups"] == 2
    assert trainer.trained[2] == task_ids[6:8]


def test_a_checkpoint_records_the_groups_launched_but_not_trained(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    *_, checkpointer, _ = _run(
        tmp_path, "colocated_async", 0, task_ids, steps=1, checkpoint_interval=1
    )
    (saved,) = checkpointer.saved
    assert saved["step"] == 1 and saved["version"] == 1
    assert sorted(saved["pending"]) == ["mixed-2", "mixed-3"]
    assert saved["launched"] == 4
    assert saved["sampler_state"] == {"epoch": 0, "position": 4}


def test_pending_groups_of_a_resumed_run_are_launched_first(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, driver, *_ = _run(
        tmp_path, "sync", 0, task_ids, steps=1, pending=["mixed-7", "mixed-8"]
    )
    assert driver.launched == ["mixed-7", "mixed-8"]
    assert trainer.trained == [["mixed-7", "mixed-8"]]


def test_every_finished_episode_feeds_the_sampler(tmp_path) -> None:
    task_ids = ["mixed-a", "mixed-b", "mixed-c"]

    class CountingSampler(EpochSampler):
        def __init__(self) -> None:
            super().__init__(task_ids, seed=0)
            self.seen: list[str] = []

        def observe(self, task_id: str, reward: float) -> None:
            self.seen.append(task_id)

    sampler = CountingSampler()
    recipe = load_recipe(ROOT / "recipes" / "tiny-cpu.yaml", ["trainer.batch_size=2"])
    engine = ScriptedEngine(load_policy("tiny")[1])
    driver = ScriptedDriver(engine)
    summary = RunSummary(run_dir=tmp_path, start_step=0, steps=0)
    loop = StepLoop(
        recipe.trainer,
        tasks={t: TaskSpec(instance_id=t, problem_statement="p") for t in task_ids},
        driver=driver,  # type: ignore[arg-type]
        trainer=RecordingTrainer(),  # type: ignore[arg-type]
        engine=engine,
        sampler=sampler,
        recorder=StepRecorder(tmp_path, summary, total_steps=1, echo=lambda _: None),
        checkpointer=RecordingCheckpointer(interval=100, total_steps=100),
        seed=0,
        stop_after_steps=1,
    )
    asyncio.run(loop.run(0))
    group_size = recipe.trainer.group_size
    assert sampler.seen == driver.observed
    assert len(sampler.seen) == group_size * len(driver.launched)


def test_a_passed_deadline_ends_the_run_after_one_step_with_a_checkpoint(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, _, summary, _, checkpointer, _ = _run(
        tmp_path, "sync", 0, task_ids, steps=3, deadline=time.monotonic() - 1
    )
    # a call always trains its first step; the next would end past the deadline
    assert trainer.trained == [["mixed-0", "mixed-1"]]
    assert summary.stopped_at_deadline == 1
    assert [saved["step"] for saved in checkpointer.saved] == [1]


def test_a_deadline_that_leaves_room_changes_nothing(tmp_path) -> None:
    task_ids = [f"mixed-{i}" for i in range(10)]
    trainer, _, summary, _, checkpointer, _ = _run(
        tmp_path, "sync", 0, task_ids, steps=3, deadline=time.monotonic() + 3600
    )
    assert len(trainer.trained) == 3
    assert summary.stopped_at_deadline is None
    assert checkpointer.saved == []


def test_each_step_reports_its_share_of_the_runs_sandbox_starts(tmp_path, monkeypatch) -> None:
    from types import SimpleNamespace

    from uni_agent_core.sandbox.pool import PoolStats

    stats = PoolStats()
    original = ScriptedDriver.group

    async def group(self, task, size, **kw):
        stats.start_attempts += size + 1  # one start failed and was retried
        stats.start_failures += 1
        stats.retries += 1
        stats.starting_peak = 3
        return await original(self, task, size, **kw)

    monkeypatch.setattr(ScriptedDriver, "group", group)
    monkeypatch.setattr(
        ScriptedDriver,
        "sandbox_factory",
        SimpleNamespace(pool=SimpleNamespace(stats=stats)),
        raising=False,
    )
    task_ids = [f"mixed-{i}" for i in range(10)]
    _, _, summary, *_ = _run(tmp_path, "sync", 0, task_ids, steps=2)
    for row in summary.metrics:  # two groups of four per step
        assert row["sandbox/start_attempts"] == 10 and row["sandbox/retries"] == 2
        assert row["sandbox/start_failures"] == 2 and row["sandbox/exhausted"] == 0
        assert row["sandbox/starting_peak"] == 3


def test_a_step_line_ends_with_the_eta_of_the_steps_left(tmp_path, monkeypatch) -> None:
    from uni_agent_core.rl import step_records

    clock = iter([100.0, 130.0])
    monkeypatch.setattr(step_records.time, "monotonic", lambda: next(clock))
    recorder = StepRecorder(tmp_path, RunSummary(tmp_path, 0, 0), total_steps=4, echo=print)
    # step 1 took 20 s and ended at 100 s; step 2 ended at 130 s: 25 s a step, 2 steps left
    assert recorder._eta(1, {"perf/step_s": 20.0}) == " ETA 60 s"
    assert recorder._eta(2, {"perf/step_s": 30.0}) == " ETA 50 s"
