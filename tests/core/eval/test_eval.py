"""Evaluation: the pass@k estimator, summaries, resumable runs, SWE-bench Verified sandbox specs."""

import asyncio
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.config.sandbox import DockerSandboxConfig, ModalSandboxConfig
from uni_agent_core.envs.verifier import Verifier, task_sandbox_factory
from uni_agent_core.eval.metrics import SampleRow, pass_at_k, summarize
from uni_agent_core.eval.runner import SAMPLES, Evaluation, read_rows
from uni_agent_core.eval.suites import resolve_suite

ROOT = Path(__file__).resolve().parents[3]
TINY = ROOT / "recipes" / "tiny-cpu.yaml"
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


@pytest.mark.parametrize(
    ("n", "c", "k"), [(5, 0, 1), (5, 2, 1), (5, 2, 2), (6, 3, 4), (4, 4, 3), (10, 1, 5)]
)
def test_pass_at_k_is_the_unbiased_estimator(n, c, k) -> None:
    outcomes = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    brute = sum(any(outcomes[i] for i in subset) for subset in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_pass_at_k_refuses_too_few_samples() -> None:
    with pytest.raises(ValueError, match="at least 3 samples"):
        pass_at_k(2, 1, 3)


def _row(task, index, resolved, level="L0", exit_reason="submitted"):
    return SampleRow(
        task_id=task,
        sample_index=index,
        reward=float(resolved),
        resolved=resolved,
        exit_reason=exit_reason,
        level=level,
    )


def test_summary_per_level_and_exit_reason() -> None:
    rows = [
        _row("a", 0, True),
        _row("a", 1, False),
        _row("b", 0, False, "L1", "max_turns"),
        _row("b", 1, False, "L1", "timeout"),
    ]
    summary = summarize(rows, k=2)
    assert summary.pass_at_1 == pytest.approx(0.25) and summary.pass_at_k == pytest.approx(0.5)
    assert summary.avg_at_k == pytest.approx(0.25)
    assert summary.by_level["L0"]["pass@2"] == 1.0 and summary.by_level["L1"]["pass@1"] == 0.0
    assert summary.exit_reasons == {"submitted": 2, "max_turns": 1, "timeout": 1}


def _recipe():
    return load_recipe(TINY, [f"sandbox.isolation={ISOLATION}"])


def test_an_interrupted_evaluation_resumes_without_redoing_samples(tmp_path, monkeypatch) -> None:
    recipe = _recipe()
    tasks = resolve_suite("micro-swe:test", recipe, max_tasks=4)
    full = asyncio.run(
        Evaluation(
            recipe, tasks, suite="micro-swe:test", k=2, out_dir=tmp_path / "full", oracle=True
        ).run_async()
    )
    rows = (tmp_path / "full" / SAMPLES).read_text().splitlines()
    partial = tmp_path / "partial"
    partial.mkdir()
    shutil.copy(tmp_path / "full" / "eval.json", partial / "eval.json")
    (partial / SAMPLES).write_text("\n".join(rows[:5]) + "\n" + rows[5][:17])  # torn last line
    calls = []
    real_oracle = Verifier.oracle

    async def counting(self, task):
        calls.append(task.instance_id)
        return await real_oracle(self, task)

    monkeypatch.setattr(Verifier, "oracle", counting)
    resumed = asyncio.run(
        Evaluation(
            recipe, tasks, suite="micro-swe:test", k=2, out_dir=partial, oracle=True
        ).run_async()
    )
    assert len(calls) == 3
    assert resumed == full and full.pass_at_1 == 1.0
    keys = [(r.task_id, r.sample_index) for r in read_rows(partial / SAMPLES)]
    assert len(keys) == len(set(keys)) == 8


def test_another_evaluation_in_the_same_directory_sets_the_old_one_aside(tmp_path) -> None:
    recipe = _recipe()
    tasks = resolve_suite("micro-swe:test", recipe, max_tasks=2)
    out = tmp_path / "eval"
    asyncio.run(
        Evaluation(recipe, tasks, suite="micro-swe:test", k=1, out_dir=out, oracle=True).run_async()
    )
    summary = asyncio.run(
        Evaluation(recipe, tasks, suite="micro-swe:test", k=3, out_dir=out, oracle=True).run_async()
    )
    assert summary.samples == 6 and len(read_rows(out / SAMPLES)) == 6
    assert len(read_rows(tmp_path / "eval.stale" / SAMPLES)) == 2


def test_eval_temperature_overrides_the_sampling_temperature_and_is_part_of_the_spec(
    tmp_path,
) -> None:
    recipe = _recipe()
    recipe.gateway.sampling.temperature = 1.0
    tasks = resolve_suite("micro-swe:test", recipe, max_tasks=1)
    sampled = Evaluation(recipe, tasks, suite="micro-swe:test", k=1, out_dir=tmp_path)
    assert sampled.recipe.gateway.sampling.temperature == 1.0
    recipe.eval.temperature = 0.0
    greedy = Evaluation(recipe, tasks, suite="micro-swe:test", k=1, out_dir=tmp_path)
    assert greedy.recipe.gateway.sampling.temperature == 0.0
    assert recipe.gateway.sampling.temperature == 1.0  # the caller's recipe is left alone
    assert (greedy.spec["temperature"], sampled.spec["temperature"]) == (0.0, 1.0)


def test_concurrency_is_the_recipes_unless_the_caller_names_one(tmp_path) -> None:
    recipe = _recipe()
    recipe.eval.concurrency = 7
    tasks = resolve_suite("micro-swe:test", recipe, max_tasks=1)
    default = Evaluation(recipe, tasks, suite="micro-swe:test", k=1, out_dir=tmp_path)
    named = Evaluation(recipe, tasks, suite="micro-swe:test", k=1, out_dir=tmp_path, concurrency=2)
    assert (default.concurrency, named.concurrency) == (7, 2)


@pytest.mark.slow
def test_killed_cli_evaluation_resumes_to_the_same_summary(tmp_path) -> None:
    command = [
        sys.executable,
        "-m",
        "uni_agent_core.cli",
        "eval",
        "--recipe",
        str(TINY),
        "--set",
        f"sandbox.isolation={ISOLATION}",
        "--oracle",
        "--max-tasks",
        "24",
        "--concurrency",
        "1",
        "--no-track",
    ]
    reference = subprocess.run(
        [*command, "--out", str(tmp_path / "ref")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert reference.returncode == 0, reference.stderr[-2000:]
    killed = tmp_path / "killed"
    process = subprocess.Popen(
        [*command, "--out", str(killed)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 300
    while len(read_rows(killed / SAMPLES)) < 6:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = len(read_rows(killed / SAMPLES))
    assert before < 24
    env = dict(os.environ)
    rerun = subprocess.run(
        [*command, "--out", str(killed)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    keys = [(r.task_id, r.sample_index) for r in read_rows(killed / SAMPLES)]
    assert len(keys) == len(set(keys)) == 24
    ours = json.loads((killed / "report.json").read_text())["summary"]
    theirs = json.loads((tmp_path / "ref" / "report.json").read_text())["summary"]
    assert ours == theirs


VERIFIED_ROW = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n",
    "test_patch": (
        "diff --git a/astropy/modeling/tests/test_separable.py "
        "b/astropy/modeling/tests/test_separable.py\n"
        "--- a/astropy/modeling/tests/test_separable.py\n"
        "+++ b/astropy/modeling/tests/test_separable.py\n"
    ),
    "problem_statement": "Modeling's `separability_matrix` does not compute separability "
    "correctly for nested CompoundModels",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-'
    'result6]"]',
    "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "difficulty": "15 min - 1 hour",
}


def test_swe_bench_verified_rows_become_container_sandbox_specs(tmp_path) -> None:
    data = tmp_path / "verified.jsonl"
    data.write_text(json.dumps(VERIFIED_ROW) + "\n")
    recipe = _recipe()
    (task,) = resolve_suite("swe-bench-verified", recipe, data=str(data))
    assert task.source["image"] == ("swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest")
    assert task.log_parser == "parse_log_pytest_v2"
    assert "source /opt/miniconda3/bin/activate" in task.test_cmd
    assert task.test_cmd.endswith("astropy/modeling/tests/test_separable.py")
    docker = task_sandbox_factory(DockerSandboxConfig(memory_mb=8192)).build(task)
    assert docker.image == task.source["image"] and str(docker.workdir) == "/testbed"
    modal = task_sandbox_factory(ModalSandboxConfig()).build(task)
    assert str(modal.workdir) == "/testbed"
