"""Whole local runs: ci-smoke end to end, colocated async with partial rollout, SIGKILL/resume."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.parity_run import parity_run
from support.tasks import TEST_KEY

from uni_agent_core.cli import main
from uni_agent_core.config import load_recipe
from uni_agent_core.envs.micro_swe.keys import HOST_KEY_PATH, write_key
from uni_agent_core.models.registry import cache_root

ROOT = Path(__file__).resolve().parents[3]
CI_SMOKE = str(ROOT / "recipes" / "ci-smoke.yaml")
ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"
SMALL = [
    # Bubblewrap keeps the repository at /workspace/repo; without it the prompt names a random
    # host directory and replays differ.
    f"sandbox.isolation={ISOLATION}",
    "trainer.batch_size=1",
    "trainer.group_size=2",
    "trainer.max_concurrent_episodes=1",
    "harness.max_turns=2",
    "gateway.sampling.max_tokens=48",
    "trainer.lr=1e-3",
]


@pytest.fixture(scope="module")
def keyed_cache(tmp_path_factory) -> Path:
    """An agent-rl cache whose micro-swe key is the tests' own (the models are this host's).

    The parity reward is a function of the sampled tokens, which depend on the task text, which
    depends on the dataset's key: with this host's random key, a few steps may all come out
    flat (no update), on one host and not another. The tests' key makes them the same
    everywhere.
    """
    cache = tmp_path_factory.mktemp("agent-rl-cache")
    write_key(cache / HOST_KEY_PATH, TEST_KEY)
    (cache / "models").symlink_to(cache_root() / "models", target_is_directory=True)
    return cache


@pytest.fixture
def same_tasks_everywhere(keyed_cache, monkeypatch) -> None:
    monkeypatch.setenv("AGENT_RL_CACHE", str(keyed_cache))


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_ci_smoke_recipe_trains_end_to_end_with_consistent_logprobs(tmp_path, capsys) -> None:
    run_dir = tmp_path / "ci-smoke"
    uri = f"sqlite:///{tmp_path}/mlruns.db"
    command = [
        "train",
        "--recipe",
        CI_SMOKE,
        "--run-dir",
        str(run_dir),
        "--set",
        f"tracking.tracking_uri={uri}",
    ]
    assert main(command) == 0
    rows = _metrics(run_dir)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["train/episodes"] == 4.0
        assert row["train/logprob_pearson"] >= 0.9999
        assert row["train/prob_diff_mean"] <= 1e-3
        for name in (
            "train/reward_mean",
            "train/pass_rate",
            "train/zero_std_group_frac",
            "train/response_tokens_mean",
            "train/turns_mean",
            "perf/tokens_per_s",
            "perf/rollout_s",
            "perf/train_s",
            "perf/wait_s",
        ):
            assert name in row, name
    assert (run_dir / "checkpoints" / "step-000002" / "manifest.json").is_file()
    out = capsys.readouterr().out
    assert "step 2/2" in out
    # the pipeline the flow runs: data validation first, the checkpoint's evaluation and MLflow
    # last (ci-smoke has no warm start, no before-training evaluation)
    started = [
        line for line in out.splitlines() if line.startswith("stage ") and "done" not in line
    ]
    assert started == [
        "stage 1/5: validate data",
        "stage 2/5: estimate difficulty",
        "stage 3/5: train",
        "stage 4/5: evaluate checkpoints",
        "stage 5/5: log to MLflow",
    ]
    assert (run_dir / "validation" / "validation.json").is_file()
    assert (
        out.splitlines()[-1] == f"trained steps 1..2 (embedded); metrics in {run_dir}/metrics.jsonl"
    )

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("agent-rl-ci").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["trainer.mode"] == "sync"
    assert run.data.metrics["eval/tasks"] == 2.0 and "eval/pass_at_1" in run.data.metrics
    params = run.data.params
    assert len(params["repro.dataset_sha256"]) == 64 and params["repro.version.torch"]
    assert params["repro.git_commit"] != "" and params["repro.cpu_count"]
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/reward_mean")]
    assert steps == [1, 2]
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"metrics.jsonl", "plots", "trajectories", "checkpoint"} <= artifacts
    # what the run used: the resolved recipe beside it and in MLflow, every section as params
    assert "resolved_recipe.yaml" in artifacts
    resolved = load_recipe(run_dir / "resolved_recipe.yaml")
    assert resolved.trainer.checkpoint_dir == run_dir / "checkpoints"
    assert resolved.curriculum.history_path == run_dir / "history.sqlite"
    given = load_recipe(CI_SMOKE, [f"tracking.tracking_uri={uri}"])
    given.trainer.checkpoint_dir = resolved.trainer.checkpoint_dir
    given.curriculum.history_path = resolved.curriculum.history_path
    assert resolved.model_dump() == given.model_dump()
    sections = {key.split(".")[0] for key in params}
    assert set(resolved.model_dump()) <= sections
    sample = json.loads(
        (run_dir / "trajectories" / "step-000001.jsonl").read_text().splitlines()[0]
    )
    assert {"prompt", "segments", "reward", "exit_reason"} <= set(sample)
    assert any(segment["trainable"] for segment in sample["segments"])


@pytest.mark.slow
def test_colocated_async_run_overlaps_versions_within_the_staleness_bound(tmp_path) -> None:
    overrides = [
        *SMALL,
        "trainer.mode=colocated_async",
        "trainer.total_steps=4",
        "trainer.max_concurrent_episodes=2",
        "trainer.staleness.max_versions=1",
        # Every step updates the weights: with the random policy most groups are flat or end
        # abnormally, and dropping them left runs with a single update by chance.
        "curriculum.drop_zero_variance_groups=false",
        "trainer.mask_abnormal_exits=false",
    ]
    summary = parity_run(CI_SMOKE, str(tmp_path / "async"), overrides).run()
    rows = summary.metrics
    assert len(rows) == 4 and rows[-1]["train/policy_version"] >= 2
    assert all(row.get("train/staleness_max", 0) <= 1 for row in rows)
    assert any(row.get("train/staleness_max", 0) >= 1 for row in rows)


def _start(run_dir: Path, steps: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    command = [
        sys.executable,
        "-m",
        "support.parity_run",
        CI_SMOKE,
        str(run_dir),
        *SMALL,
        f"trainer.total_steps={steps}",
        "trainer.checkpoint_interval=1",
        "trainer.keep_checkpoints=2",
        "trainer.resume=auto",
    ]
    return subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


@pytest.mark.slow
@pytest.mark.skipif(ISOLATION == "none", reason="replays need bubblewrap's fixed workdir")
def test_sigkilled_run_resumes_with_the_same_losses(tmp_path, same_tasks_everywhere) -> None:
    reference = tmp_path / "reference"
    done = _start(reference, 4)
    assert done.wait(timeout=600) == 0, done.stderr.read().decode()[-2000:]
    expected = {row["step"]: row for row in _metrics(reference)}
    assert sorted(expected) == [1, 2, 3, 4]
    assert any("train/loss" in expected[step] for step in (3, 4)), "nothing was trained"

    killed = tmp_path / "killed"
    process = _start(killed, 4)
    deadline = time.monotonic() + 600
    while not (killed / "checkpoints" / "step-000002" / "manifest.json").is_file():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = _start(killed, 4)
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-2000:]
    after = {row["step"]: row for row in _metrics(killed)}
    for step in (3, 4):
        ours, theirs = after[step], expected[step]
        assert ("train/loss" in ours) == ("train/loss" in theirs)
        if "train/loss" in ours:
            assert abs(ours["train/loss"] - theirs["train/loss"]) <= 1e-4, step
            # GRPO's on-policy loss is ~0 by construction; the gradient is the sharper check.
            assert abs(ours["train/grad_norm"] - theirs["train/grad_norm"]) <= 1e-4, step
        assert ours["train/reward_mean"] == theirs["train/reward_mean"]


@pytest.mark.slow
def test_separate_async_lends_the_idle_trainer_to_the_rollout_replicas(
    tmp_path, same_tasks_everywhere
) -> None:
    overrides = [
        *SMALL,
        "trainer.mode=separate_async",
        "trainer.total_steps=3",
        "trainer.max_concurrent_episodes=2",
        "trainer.staleness.max_versions=1",
        # Round robin alternates the lent trainer with the rollout replica, so the first step
        # (the trainer is lent before any group can finish) always sends it requests; the
        # cache-aware default would rightly keep these few sessions on their warm replica.
        "router.policy=round_robin",
    ]
    run = parity_run(CI_SMOKE, str(tmp_path / "separate"), overrides)
    rows = run.run().metrics
    assert len(rows) == 3 and rows[-1]["train/policy_version"] >= 1
    assert all(row.get("train/staleness_max", 0) <= 1 for row in rows)
    # Step 1 always waits for its batch (nothing was launched before it), so the trainer served
    # rollouts meanwhile; later steps lend only when their batch is not ready yet.
    assert rows[0]["perf/trainer_lent_s"] > 0
    assert rows[0]["rollout/trainer_replica_tokens"] > 0
    assert all(row["perf/trainer_lent_s"] >= 0 for row in rows)
    assert all(row["perf/trainer_reclaim_s"] >= 0 for row in rows)
    # The rollout router's figures of each step (two replicas: the rollout one and the trainer).
    # Step 1 routed its own batch; a later step's batch may have finished during the step before
    # it, and a step during which no request completed has no prompt-token figures.
    assert rows[0]["router/prompt_tokens"] > 0
    routed = [row for row in rows if "router/prompt_tokens" in row]
    assert all(row["router/prompt_tokens"] > 0 for row in routed)
    assert all(0 <= row["router/cache_hit_rate"] <= 1 for row in routed)
    assert all(row["router/failed"] == 0 for row in rows)


def test_role_switching_beside_remote_servers_lends_an_in_process_trainer_replica(
    tmp_path,
) -> None:
    """The `openai_server` engine config has no batch size or prefix cache: the trainer's
    replica takes the in-process engine's defaults (it used to fail on the missing fields)."""
    from uni_agent_core.config.inference import HFEngineConfig
    from uni_agent_core.models import load_policy
    from uni_agent_core.rl.run import TrainingRun

    remote = '{"type": "openai_server", "base_urls": ["http://127.0.0.1:9"], "model": "m"}'
    recipe = load_recipe(CI_SMOKE, ["trainer.mode=separate_async", f"engine={remote}"])
    run = TrainingRun(recipe, run_dir=tmp_path, track=False)
    model, run.tokenizer = load_policy("tiny")
    replica = run._trainer_replica(SimpleNamespace(compute_model=model, version=3))
    assert replica is not None
    defaults = HFEngineConfig()
    assert replica.max_batch_size == defaults.max_batch_size
    assert replica.prefix_cache is not None
    assert replica.prefix_cache.capacity_tokens == defaults.prefix_cache_tokens
    assert replica.policy_version == 3


def test_curriculum_enabled_run_feeds_history_and_reports_metrics(tmp_path) -> None:
    from uni_agent_core.curriculum.history import AttemptHistory

    overrides = [
        *SMALL,
        "trainer.total_steps=2",
        "curriculum.enabled=true",
        "curriculum.window=2",
        "curriculum.min_attempts=2",
    ]
    summary = parity_run(CI_SMOKE, str(tmp_path / "cur"), overrides).run()
    assert all("curriculum/active_tasks" in row for row in summary.metrics)
    assert AttemptHistory(tmp_path / "cur" / "history.sqlite").count() == 4
