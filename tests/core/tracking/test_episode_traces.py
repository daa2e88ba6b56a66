"""Episodes as MLflow traces: which episodes are traced, and what a trace holds (real MLflow
stores in a temporary sqlite file, the tiny policy's tokenizer)."""

from __future__ import annotations

import json

import mlflow
import pytest

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.models import load_policy
from uni_agent_core.rl.step_records import RunSummary, StepRecorder
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker
from uni_agent_core.tracking.traces import (
    SOURCE_RUN,
    EpisodeTracer,
    TraceSampler,
    failure_signature,
    trace_link_template,
)
from uni_agent_core.types import (
    ExitReason,
    ModelCall,
    RolloutResult,
    ToolCall,
    Trajectory,
    Verification,
)

T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def tokenizer():
    return load_policy("tiny")[1]


def result(task: str = "t", sample: int = 0, **fields) -> RolloutResult:
    fields.setdefault("reward", 0.0)
    fields.setdefault("exit_reason", ExitReason.SUBMITTED)
    return RolloutResult(task_id=task, sample_index=sample, **fields)


def test_failure_signatures_tell_kinds_of_failure_apart() -> None:
    verified = Verification(tests_run=2, passed=1, failed=1, status="RESOLVED_NO")
    assert failure_signature(result(resolved=True, reward=1.0)) is None
    assert failure_signature(result(verification=verified)) == "submitted: tests RESOLVED_NO"
    unapplied = verified.model_copy(update={"patch_applied": False})
    assert failure_signature(result(verification=unapplied)) == "submitted: patch did not apply"
    broken = result(exit_reason=ExitReason.SANDBOX_ERROR, error="SandboxError: gone")
    assert failure_signature(broken) == "sandbox_error: SandboxError"
    flagged = result(verification=verified, leak_flagged=True)
    assert failure_signature(flagged).endswith("(leak flagged)")


def test_sample_n_traces_the_first_n_and_each_new_kind_of_failure() -> None:
    sampler = TraceSampler(per_step=1)
    step = [
        result("b", 0, exit_reason=ExitReason.MAX_TURNS),
        result("a", 0, resolved=True, reward=1.0),
        result("a", 1, exit_reason=ExitReason.MAX_TURNS),
    ]
    chosen = sampler.choose(step)
    assert [(r.task_id, r.sample_index) for r in chosen] == [("a", 0), ("a", 1)]
    # The next step: max_turns failures are old news; a timeout is new.
    later = [result("c", 0, resolved=True), result("d", 0, exit_reason=ExitReason.MAX_TURNS)]
    later.append(result("e", 0, exit_reason=ExitReason.TIMEOUT))
    assert [r.task_id for r in sampler.choose(later)] == ["c", "e"]
    assert [r.task_id for r in TraceSampler(per_step=None).choose(later)] == ["c", "d", "e"]
    assert TraceSampler.from_policy(TrackingConfig(traces="off").traces_per_step) is None


def test_an_evaluation_takes_its_first_n_episodes_and_new_failures() -> None:
    sampler = TraceSampler(per_step=1)
    taken = [
        sampler.take(result("a", 0, resolved=True)),
        sampler.take(result("b", 0, resolved=True)),
        sampler.take(result("c", 0, exit_reason=ExitReason.MAX_TURNS)),
        sampler.take(result("d", 0, exit_reason=ExitReason.MAX_TURNS)),
    ]
    assert taken == [True, False, True, False]


def test_trace_links_point_at_the_server_or_the_local_mlflow_ui() -> None:
    local = trace_link_template("sqlite:///mlruns.db", "1")
    assert local.startswith("http://127.0.0.1:5000/#/experiments/1/traces?")
    link = trace_link_template("http://127.0.0.1:5000/", "7")
    assert link.format(trace_id="tr-1") == (
        "http://127.0.0.1:5000/#/experiments/7/traces?selectedEvaluationId=tr-1"
    )


def episode(tokenizer) -> RolloutResult:
    """An episode of two model calls on one chain, the second rolled back and rewritten, a tool
    call between them, and a verifier run."""
    encode = tokenizer.encode
    prompt = encode("fix the bug")
    first, context = encode(" look around"), encode(" output of ls")
    rewrite, second = encode(" a better action"), encode(" submit now")
    dropped = encode(" a bad action")
    response = first + context + rewrite + second
    mask = [1] * len(first) + [0] * (len(context) + len(rewrite)) + [1] * len(second)
    chain = Trajectory(
        session_id="s",
        chain_id=0,
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        policy_versions=[3 if m else -1 for m in mask],
        metadata={
            "opened_by": "first",
            "rollback_marks": [{"at": len(first) + len(context), "call": 1}],
        },
    )
    start = len(first) + len(context) + len(rewrite)

    def call(index, continuation, begin, n, superseded=False, **fields) -> ModelCall:
        return ModelCall(
            index=index,
            chain_id=0,
            continuation=continuation,
            prompt_tokens=100,
            completion_tokens=n,
            finish_reason="stop",
            started_at=T0 + index,
            latency_s=0.5,
            response_start=begin,
            superseded=superseded,
            **fields,
        )

    return result(
        "task-1",
        0,
        harness="react",
        group_id="task-1@1",
        started_at=T0,
        trajectories=[chain],
        calls=[
            call(0, "new", 0, len(first), opened_by="first"),
            call(1, "append", len(first) + len(context), len(dropped), True, dropped_ids=dropped),
            call(2, "rollback", start, len(second)),
        ],
        tool_calls=[
            ToolCall(
                name="shell",
                arguments='{"command": "ls"}',
                output="output of ls",
                exit_code=0,
                started_at=T0 + 0.6,
                seconds=0.2,
            )
        ],
        verification=Verification(
            tests_run=3, passed=2, failed=1, status="RESOLVED_NO", started_at=T0 + 4, seconds=1.0
        ),
        diff="--- a/x.py\n+++ b/x.py\n",
    )


def test_an_episode_trace_has_its_spans_in_order(tmp_path, monkeypatch, tokenizer) -> None:
    monkeypatch.chdir(tmp_path)
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="t")
    tracker = MlflowTracker(config, run_name="r")
    tracer = EpisodeTracer.for_tracker(tracker, config, tokenizer)
    traced = tracer.trace_step(1, [episode(tokenizer)])
    trace_id = traced[("task-1", 0)]
    trace = mlflow.MlflowClient(tracking_uri=config.tracking_uri).get_trace(trace_id)
    assert trace.info.trace_metadata[SOURCE_RUN] == tracker.run_id
    assert trace.info.tags["agent_rl.exit_reason"] == "submitted"
    root, *children = trace.data.spans
    assert root.name == "episode task-1#0" and root.span_type == "AGENT"
    assert root.attributes["policy_versions"] == [3]
    assert root.attributes["harness"] == "react" and root.attributes["chains"] == 1
    assert [span.name for span in children] == [
        "model call 0 (new chain 0)",
        "tool shell",
        "model call 1 (rolled back)",
        "model call 2 (rollback chain 0)",
        "verifier",
    ]
    assert all(span.parent_id == root.span_id for span in children)
    first, tool, dropped, rewritten, verifier = children
    assert first.inputs["context"] == tokenizer.decode(tokenizer.encode("fix the bug"))
    assert first.outputs["completion"] == tokenizer.decode(tokenizer.encode(" look around"))
    assert dropped.outputs["completion"] == tokenizer.decode(tokenizer.encode(" a bad action"))
    assert "a better action" in rewritten.inputs["context"]
    assert rewritten.outputs["completion"] == tokenizer.decode(tokenizer.encode(" submit now"))
    assert tool.attributes["exit_code"] == 0 and tool.outputs == {"output": "output of ls"}
    assert verifier.attributes["tests_run"] == 3 and verifier.attributes["failed"] == 1
    assert first.start_time_ns == int(T0 * 1e9) and first.end_time_ns == int((T0 + 0.5) * 1e9)


def test_each_step_writes_traced_trajectories_and_views(tmp_path, monkeypatch, tokenizer) -> None:
    monkeypatch.chdir(tmp_path)
    config = TrackingConfig(
        tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="t", traces="sample 1"
    )
    tracker = MlflowTracker(config, run_name="r")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = StepRecorder(
        run_dir,
        RunSummary(run_dir, 0, 0),
        total_steps=2,
        echo=lambda line: None,
        tracker=tracker,
        trajectories_per_step=0,
        tokenizer=tokenizer,
        tracer=EpisodeTracer.for_tracker(tracker, config, tokenizer),
    )
    metrics = {"perf/rollout_s": 1.0, "perf/tokens_per_s": 1.0}
    recorder.record(1, 0, metrics, [episode(tokenizer)])
    (row,) = [json.loads(line) for line in (run_dir / "trajectories/step-000001.jsonl").open()]
    assert row["trace_id"].startswith("tr-") and row["opened_by"] == "first"
    (rollback,) = row["rollbacks"]
    assert rollback["dropped_text"] == tokenizer.decode(tokenizer.encode(" a bad action"))
    assert len(row["tokens"]["ids"]) == len(row["tokens"]["text"]) == len(row["tokens"]["mask"])
    assert (run_dir / "trajectories/step-000001.html").is_file()
    client = mlflow.MlflowClient(tracking_uri=config.tracking_uri)
    logged = {a.path for a in client.list_artifacts(tracker.run_id, "trajectories")}
    assert logged == {"trajectories/step-000001.jsonl", "trajectories/step-000001.html"}
    # A step replayed after a resume is in MLflow already: no second trace.
    recorder.record(1, 0, metrics, [episode(tokenizer)])
    traces = mlflow.search_traces(locations=[tracker.experiment_id], return_type="list")
    assert len(traces) == 1
