"""Before -> after RL: the two evaluations are paired (same tasks, same sample seeds), the delta
comes with its paired interval and a flip table of every task, and a directory holding an
evaluation of other weights is set aside, never reused."""

from __future__ import annotations

import asyncio
import csv
import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from uni_agent_core.config import load_recipe
from uni_agent_core.eval.metrics import SampleRow
from uni_agent_core.eval.paired import FLIPS_CSV, FLIPS_MD, compare_evaluations, write_flip_table
from uni_agent_core.eval.runner import SAMPLES, SPEC, STALE_SUFFIX, Evaluation
from uni_agent_core.eval.suites import recipe_suite, resolve_suite
from uni_agent_core.rundir.checkpoint import latest_complete, save_checkpoint
from uni_agent_core.types import ExitReason, RolloutResult

ROOT = Path(__file__).resolve().parents[3]
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


def _recipe():
    return load_recipe(ROOT / "recipes" / "tiny-cpu.yaml", [f"sandbox.isolation={ISOLATION}"])


def _seeds(evaluation: Evaluation) -> dict[tuple[str, int], int]:
    """The sampling seed of every (task, sample) the evaluation runs."""
    seeds: dict[tuple[str, int], int] = {}

    async def run(task, index, *, seed):
        seeds[(task.instance_id, index)] = seed
        return RolloutResult(
            task_id=task.instance_id, sample_index=index, reward=0.0, exit_reason="submitted"
        )

    episode = evaluation._episode_fn(run, {t.instance_id: t.difficulty for t in evaluation.tasks})
    for task in evaluation.tasks:
        for index in range(evaluation.k):
            asyncio.run(episode(task, index))
    return seeds


def test_before_and_after_evaluations_score_the_same_tasks_with_the_same_seeds(tmp_path) -> None:
    recipe = _recipe()
    suite = recipe_suite(recipe)
    # as the flow runs them: one recipe, the base policy, then weights of policy version 5
    before = Evaluation(
        recipe, resolve_suite(suite, recipe, max_tasks=3), suite=suite, k=2, out_dir=tmp_path / "b"
    )
    after = Evaluation(
        recipe,
        resolve_suite(suite, recipe, max_tasks=3),
        suite=suite,
        k=2,
        out_dir=tmp_path / "a",
        served_as=("step-5", 5),
    )
    assert before.version != after.version
    assert before.spec["tasks"] == after.spec["tasks"] and len(before.spec["tasks"]) == 3
    seeds = _seeds(before)
    assert seeds == _seeds(after) and len(set(seeds.values())) == 6


def _write(directory: Path, outcomes: dict[str, tuple[bool, str]], **spec) -> Path:
    directory.mkdir(parents=True)
    base = {"suite": "s", "tasks": list(outcomes), "k": 1, "seed": 0, "temperature": 1.0}
    (directory / SPEC).write_text(json.dumps(base | spec))
    with (directory / SAMPLES).open("w") as handle:
        for task, (resolved, exit_reason) in outcomes.items():
            row = SampleRow(
                task_id=task,
                sample_index=0,
                reward=float(resolved),
                resolved=resolved,
                exit_reason=exit_reason,
                diff=f"--- a/{task}.py\n+++ b/{task}.py\n| x\n",
            )
            handle.write(row.model_dump_json() + "\n")
    return directory


def test_the_delta_its_interval_and_a_flip_row_for_every_paired_task(tmp_path) -> None:
    timeout = ExitReason.TEST_TIMEOUT.value
    before = {f"t{i}": (False, "max_turns") for i in range(8)} | {"t8": (True, "submitted")}
    after = {f"t{i}": (True, "submitted") for i in range(6)} | {
        "t6": (False, timeout),
        "t7": (False, "max_turns"),
        "t8": (False, "submitted"),
    }
    comparison = compare_evaluations(_write(tmp_path / "b", before), _write(tmp_path / "a", after))
    assert comparison.delta == pytest.approx(6 / 9 - 1 / 9)
    assert comparison.low <= comparison.delta <= comparison.high
    assert comparison.low > 0 and comparison.verdict == "a gain beyond noise"
    metrics = comparison.metrics()
    assert metrics["eval/paired_tasks"] == 9.0
    assert (metrics["eval/flips_up"], metrics["eval/flips_down"]) == (6.0, 1.0)
    assert comparison.exits_before == {"max_turns": 8, "submitted": 1}
    assert comparison.exits_after == {"submitted": 7, timeout: 1, "max_turns": 1}

    write_flip_table(comparison, tmp_path / "flips")
    rows = list(csv.DictReader((tmp_path / "flips" / FLIPS_CSV).open()))
    assert sorted(row["task_id"] for row in rows) == sorted(before)
    directions = {row["task_id"]: row["direction"] for row in rows}
    assert directions["t0"] == "up" and directions["t8"] == "down" and directions["t7"] == "same"
    t6 = next(row for row in rows if row["task_id"] == "t6")
    assert (t6["before_exit"], t6["after_exit"]) == ("max_turns", timeout)
    assert (t6["before_test_timeouts"], t6["after_test_timeouts"]) == ("0", "1")
    assert t6["after_diff"].startswith("--- a/t6.py\n")
    table = (tmp_path / "flips" / FLIPS_MD).read_text()
    task_lines = [line for line in table.splitlines() if re.match(r"\| t\d ", line)]
    assert "a gain beyond noise" in table and len(task_lines) == 9


def test_a_small_change_is_not_distinguishable_from_noise(tmp_path) -> None:
    before = {"a": (False, "submitted"), "b": (True, "submitted"), "c": (False, "submitted")}
    after = {"a": (True, "submitted"), "b": (True, "submitted"), "c": (False, "submitted")}
    comparison = compare_evaluations(_write(tmp_path / "b", before), _write(tmp_path / "a", after))
    assert comparison.low <= 0 <= comparison.high
    assert comparison.verdict == "not distinguishable from noise"


def test_evaluations_that_are_not_paired_are_refused(tmp_path) -> None:
    before = _write(tmp_path / "b", {"a": (True, "submitted")})
    other_tasks = _write(tmp_path / "a", {"z": (True, "submitted")})
    with pytest.raises(ValueError, match="not paired.*tasks"):
        compare_evaluations(before, other_tasks)
    other_seed = _write(tmp_path / "c", {"a": (True, "submitted")}, seed=1)
    with pytest.raises(ValueError, match="not paired.*seed"):
        compare_evaluations(before, other_seed)


class _Weights:
    """Stands for a trained model: `save_pretrained` writes its weights' bytes."""

    def __init__(self, fill: float) -> None:
        self.fill = fill

    def save_pretrained(self, path: Path, safe_serialization: bool = True) -> None:
        from safetensors.torch import save_file

        path.mkdir(parents=True, exist_ok=True)
        save_file({"w": torch.full((4,), self.fill)}, str(path / "model.safetensors"))


def _train(directory: Path, fill: float) -> None:
    """A run with `resume: false` writes step-000002 again, with other weights."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    save_checkpoint(directory, 2, model=_Weights(fill), optimizer=optimizer, state={"version": 2})


def test_a_retrained_checkpoint_is_evaluated_afresh_not_reused(tmp_path) -> None:
    recipe = _recipe()
    suite = recipe_suite(recipe)
    tasks = resolve_suite(suite, recipe, max_tasks=1)
    out = tmp_path / "eval" / "micro-swe-test-step-000002"

    def evaluation(err) -> Evaluation:
        checkpoint = latest_complete(tmp_path / "checkpoints")
        return Evaluation(
            recipe, tasks, suite=suite, k=1, out_dir=out, checkpoint=checkpoint, err=err
        )

    _train(tmp_path / "checkpoints", 1.0)
    first = evaluation(None)
    first._check_spec()
    (out / SAMPLES).write_text('{"old": "samples of the first weights"}\n')
    first._check_spec()  # the same weights: the evaluation continues in place
    assert (out / SAMPLES).is_file()

    _train(tmp_path / "checkpoints", 2.0)
    lines: list[str] = []

    class Lines:
        def write(self, text: str) -> None:
            lines.append(text)

    second = evaluation(Lines())
    assert second.spec["checkpoint"] == first.spec["checkpoint"]
    assert second.spec["weights_sha256"] != first.spec["weights_sha256"]
    second._check_spec()
    assert not (out / SAMPLES).exists()
    assert json.loads((out / SPEC).read_text()) == second.spec
    stale = out.with_name(out.name + STALE_SUFFIX)
    assert json.loads((stale / SPEC).read_text()) == first.spec
    assert "other weights_sha256" in "".join(lines)
