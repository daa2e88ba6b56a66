"""Episodes as MLflow traces: what the agent did, span by span, linked to its MLflow run.

An episode's trace has a root span (`episode <task>#<sample>`: task, harness, group, policy
versions, reward, exit reason, leak flag; in: the prompt the harness opened with, out: its diff)
and, in time order under it, a span per model call (tokens in, out and cached, finish reason,
replica, latency, chain, whether the call appended to its chain, opened one and why, or rolled
one back; in: the context the harness added since the chain's last call, out: the completion, as
decoded text), per tool call (arguments, exit code, clipped output, seconds: the calls a white-box
harness ran, or, for a black-box one, the calls the model asked for) and for the verifier (tests
run, passed and failed, seconds). The spans keep the episode's own clock.

Which episodes are traced is the recipe's `tracking.traces` (`TraceSampler`): a few a step and
every episode that fails in a way the run has not seen before, so a long run's store stays
small. Traces are written with MLflow's tracing API (`start_span_no_context`) into the run's
experiment, their metadata naming the run (`mlflow.sourceRun`): the MLflow UI lists them on
the run's page and the experiment's Traces tab. MLflow is imported lazily.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.tracking.runs import ui_address
from uni_agent_core.types import ModelCall, RolloutResult, Trajectory

logger = logging.getLogger(__name__)

SOURCE_RUN = "mlflow.sourceRun"
"""The trace metadata key MLflow links a trace to its run by."""
TEXT_SHOWN = 4000
"""Characters of a span's decoded input or output kept (the head and the tail)."""
_NS = 1_000_000_000


def trace_link_template(tracking_uri: str, experiment_id: str) -> str:
    """Where the MLflow UI shows a trace of `tracking_uri`'s store (`{trace_id}` left to fill):
    the server itself, or for a local store the `mlflow ui` address `agent-rl runs latest` and
    `docs/viewer.md` tell users to start (`tracking/runs.py::ui_address`)."""
    experiment = f"{ui_address(tracking_uri)}/#/experiments/{experiment_id}"
    return f"{experiment}/traces?selectedEvaluationId={{trace_id}}"


def clip(text: str, limit: int = TEXT_SHOWN) -> str:
    """`text`, or its head and tail around a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters left out ...]\n{text[-half:]}"


def failure_signature(result: RolloutResult) -> str | None:
    """How an episode failed, coarsely (None when it resolved its task): the exit reason and
    what the verifier made of the diff. Two failures with one signature are the same kind."""
    if result.resolved:
        return None
    verdict = result.verification
    if result.error:
        outcome = result.error.split(":", 1)[0]
    elif verdict is None:
        outcome = "not verified"
    elif not verdict.patch_applied:
        outcome = "patch did not apply"
    elif verdict.timed_out:
        outcome = "tests timed out"
    else:
        outcome = f"tests {verdict.status or 'failed'}"
    leak = " (leak flagged)" if result.leak_flagged else ""
    return f"{result.exit_reason.value}: {outcome}{leak}"


@dataclass
class TraceSampler:
    """Chooses the episodes of each step (or evaluation) to trace: `tracking.traces`.

    Args:
        per_step: the first `per_step` episodes by (task, sample), as `trajectories/` writes
            them; None traces every episode.
        new_failures: also trace each episode whose `failure_signature` this sampler has not
            seen before.
    """

    per_step: int | None
    new_failures: bool = True
    seen: set[str] = field(default_factory=set)
    taken: int = 0
    """Episodes `take` has chosen (an evaluation is one step)."""

    @classmethod
    def from_policy(cls, per_step: int | None) -> TraceSampler | None:
        """The sampler of a recipe's `tracking.traces_per_step` (None: `off`)."""
        if per_step == 0:
            return None
        return cls(per_step)

    def take(self, result: RolloutResult) -> bool:
        """Whether to trace an episode of an evaluation, as it finishes: the first `per_step`
        and every failure of a new kind."""
        signature = failure_signature(result)
        new_failure = signature is not None and signature not in self.seen
        if signature is not None:
            self.seen.add(signature)
        if (
            self.per_step is None
            or self.taken < self.per_step
            or (new_failure and self.new_failures)
        ):
            self.taken += 1
            return True
        return False

    def choose(self, results: Sequence[RolloutResult]) -> list[RolloutResult]:
        ordered = sorted(results, key=lambda r: (r.task_id, r.sample_index))
        chosen = list(ordered) if self.per_step is None else ordered[: self.per_step]
        taken = {id(result) for result in chosen}
        for result in ordered:
            signature = failure_signature(result)
            if signature is None or signature in self.seen:
                continue
            self.seen.add(signature)
            if self.new_failures and id(result) not in taken:
                chosen.append(result)
                taken.add(id(result))
        return chosen


class EpisodeTracer:
    """Writes episodes as traces of one MLflow run.

    Args:
        run_id: the MLflow run the traces belong to.
        experiment_id: its experiment.
        tokenizer: decodes the spans' text.
        sampler: which episodes to trace.
        kind: `train` or `eval` (a tag on every trace, so the two can be filtered apart).
        tracking_uri: the MLflow tracking URI (the views link each trace in its UI).
    """

    def __init__(
        self,
        *,
        run_id: str,
        experiment_id: str,
        tokenizer: Any,
        sampler: TraceSampler,
        kind: str = "train",
        tracking_uri: str = "",
    ) -> None:
        self.run_id = run_id
        self.experiment_id = experiment_id
        self.tokenizer = tokenizer
        self.sampler = sampler
        self.kind = kind
        self.trace_link = trace_link_template(tracking_uri, experiment_id)
        """The MLflow UI address of a trace, with `{trace_id}` to fill."""

    @classmethod
    def for_tracker(
        cls, tracker: Any, config: TrackingConfig, tokenizer: Any, *, kind: str = "train"
    ) -> EpisodeTracer | None:
        """The tracer of an `MlflowTracker`'s run under the recipe's `tracking` section (None
        when `traces: off`)."""
        return cls._of_run(tracker.run_id, tracker.experiment_id, config, tokenizer, kind)

    @classmethod
    def for_run(
        cls, run_id: str, config: TrackingConfig, tokenizer: Any, *, kind: str
    ) -> EpisodeTracer | None:
        """The tracer of an existing MLflow run (an evaluation traced into its training run);
        None when `traces: off`."""
        import mlflow

        run = mlflow.MlflowClient(tracking_uri=config.tracking_uri).get_run(run_id)
        mlflow.set_tracking_uri(config.tracking_uri)  # the tracing API writes to the global URI
        return cls._of_run(run_id, run.info.experiment_id, config, tokenizer, kind)

    @classmethod
    def _of_run(
        cls, run_id: str, experiment_id: str, config: TrackingConfig, tokenizer: Any, kind: str
    ) -> EpisodeTracer | None:
        sampler = TraceSampler.from_policy(config.traces_per_step)
        if sampler is None:
            return None
        return cls(
            run_id=run_id,
            experiment_id=experiment_id,
            tokenizer=tokenizer,
            sampler=sampler,
            kind=kind,
            tracking_uri=config.tracking_uri,
        )

    def trace_episode(self, result: RolloutResult, *, step: int) -> str | None:
        """Trace one episode of an evaluation if the sampler takes it; returns its trace id.
        Never raises (a trace is a by-product)."""
        return self._trace_safely(result, step) if self.sampler.take(result) else None

    def trace_step(self, step: int, results: Sequence[RolloutResult]) -> dict[tuple[str, int], str]:
        """Trace the sampled episodes of a step; returns their trace ids by (task, sample).

        Tracing never fails a run: an episode whose trace cannot be written is logged and
        skipped.
        """
        traced: dict[tuple[str, int], str] = {}
        for result in self.sampler.choose(results):
            trace_id = self._trace_safely(result, step)
            if trace_id:
                traced[(result.task_id, result.sample_index)] = trace_id
        if traced:
            import mlflow

            mlflow.flush_trace_async_logging()
        return traced

    def _trace_safely(self, result: RolloutResult, step: int) -> str | None:
        """`trace`, with a failure logged and None returned: a trace is a by-product."""
        try:
            return self.trace(result, step=step)
        except Exception:  # noqa: BLE001 - deliberate boundary: a trace never fails a run
            logger.warning(
                "episode %s#%d: no trace", result.task_id, result.sample_index, exc_info=True
            )
            return None

    def trace(self, result: RolloutResult, *, step: int) -> str | None:
        """Write one episode's trace; returns its id (None when tracing is disabled)."""
        import mlflow
        from mlflow.entities import SpanType

        chains = {t.chain_id: t for t in result.trajectories}
        start_s = result.started_at or min((c.started_at for c in result.calls), default=0.0)
        end_s = max(_episode_end(result), start_s)
        tags = {
            "agent_rl.kind": self.kind,
            "agent_rl.step": str(step),
            "agent_rl.task_id": result.task_id,
            "agent_rl.harness": result.harness,
            "agent_rl.exit_reason": result.exit_reason.value,
            "agent_rl.reward": f"{result.reward:g}",
        }
        root = mlflow.start_span_no_context(
            f"episode {result.task_id}#{result.sample_index}",
            span_type=SpanType.AGENT,
            inputs={"prompt": clip(_opening_prompt(result, self.tokenizer))},
            attributes=_episode_attributes(result, step),
            tags=tags,
            metadata={SOURCE_RUN: self.run_id},
            experiment_id=self.experiment_id,
            start_time_ns=_ns(start_s),
        )
        if not getattr(root, "trace_id", None) or not root.span_id:
            return None
        for span in _child_spans(result, chains, self.tokenizer):
            child = mlflow.start_span_no_context(
                span.name,
                span_type=getattr(SpanType, span.kind),
                parent_span=root,
                inputs=span.inputs,
                attributes=span.attributes,
                start_time_ns=_ns(span.start_s),
            )
            child.set_outputs(span.outputs)
            if span.error:
                child.set_status("ERROR")
            child.end(end_time_ns=_ns(max(span.end_s, span.start_s)))
        root.set_outputs({"reward": result.reward, "diff": clip(result.diff)})
        if result.error or result.exit_reason.value.endswith("_error"):
            root.set_status("ERROR")
        root.end(end_time_ns=_ns(end_s))
        return root.trace_id


@dataclass
class _Span:
    name: str
    kind: str
    start_s: float
    end_s: float
    inputs: Any
    outputs: Any
    attributes: dict[str, Any]
    error: bool = False


def _ns(seconds: float) -> int:
    return int(seconds * _NS)


def _episode_end(result: RolloutResult) -> float:
    ends = [c.started_at + c.latency_s for c in result.calls]
    ends += [t.started_at + t.seconds for t in result.tool_calls if t.started_at]
    if result.verification is not None and result.verification.started_at:
        ends.append(result.verification.started_at + result.verification.seconds)
    if result.started_at:
        ends.append(result.started_at + sum(result.timings.values()))
    return max(ends, default=result.started_at)


def _episode_attributes(result: RolloutResult, step: int) -> dict[str, Any]:
    versions = sorted(
        {
            v
            for t in result.trajectories
            for v, m in zip(t.policy_versions, t.loss_mask, strict=True)
            if m
        }
    )
    return {
        "task_id": result.task_id,
        "sample_index": result.sample_index,
        "step": step,
        "harness": result.harness,
        "group_id": result.group_id,
        "task_level": result.task_level or "",
        "started_version": result.started_version,
        "policy_versions": versions,
        "reward": result.reward,
        "resolved": result.resolved,
        "exit_reason": result.exit_reason.value,
        "leak_flagged": result.leak_flagged,
        "error": result.error or "",
        "turns": result.turns,
        "chains": len(result.trajectories),
        "trainable_tokens": sum(t.trainable_tokens for t in result.trajectories),
        "timings_s": {k: round(v, 3) for k, v in result.timings.items()},
    }


def _opening_prompt(result: RolloutResult, tokenizer: Any) -> str:
    if not result.trajectories:
        return ""
    first = min(result.trajectories, key=lambda t: t.chain_id)
    return tokenizer.decode(first.prompt_ids)


def _child_spans(
    result: RolloutResult, chains: dict[int, Trajectory], tokenizer: Any
) -> list[_Span]:
    spans = list(_model_call_spans(result.calls, chains, tokenizer))
    if result.tool_calls:
        spans += [
            _Span(
                name=f"tool {call.name}",
                kind="TOOL",
                start_s=call.started_at,
                end_s=call.started_at + call.seconds,
                inputs={"arguments": call.arguments},
                outputs={"output": call.output},
                attributes={
                    "exit_code": call.exit_code,
                    "error": call.error,
                    "seconds": round(call.seconds, 3),
                },
                error=call.error,
            )
            for call in result.tool_calls
        ]
    else:  # a black-box harness ran its tools out of sight: the calls the model asked for
        spans += [
            _Span(
                name=f"tool {asked['name']}",
                kind="TOOL",
                start_s=call.started_at + call.latency_s,
                end_s=call.started_at + call.latency_s,
                inputs={"arguments": asked.get("arguments", "")},
                outputs=None,
                attributes={"asked_by_model_call": call.index, "observed": False},
            )
            for call in result.calls
            for asked in call.tool_calls
        ]
    verdict = result.verification
    if verdict is not None:
        spans.append(
            _Span(
                name="verifier",
                kind="EVALUATOR",
                start_s=verdict.started_at,
                end_s=verdict.started_at + verdict.seconds,
                inputs={"diff": clip(result.diff)},
                outputs={"reward": result.reward, "resolved": result.resolved},
                attributes=verdict.model_dump(exclude={"started_at"}),
                error=verdict.error is not None,
            )
        )
    spans.sort(key=lambda span: span.start_s)
    return spans


def _model_call_spans(
    calls: Iterable[ModelCall], chains: dict[int, Trajectory], tokenizer: Any
) -> Iterable[_Span]:
    ends: dict[int, int] = {}
    """Per chain, the response index where the last kept call's output ended."""
    for call in calls:
        chain = chains.get(call.chain_id)
        if chain is None:
            continue
        marks = {m["call"]: m["at"] for m in chain.metadata.get("rollback_marks", [])}
        previous = ends.get(call.chain_id)
        context_end = marks.get(call.index, call.response_start)
        if previous is None:
            context = tokenizer.decode(chain.prompt_ids + chain.response_ids[:context_end])
        else:
            context = tokenizer.decode(chain.response_ids[previous:context_end])
        if call.superseded:
            output_ids = call.dropped_ids
        else:
            output_ids = chain.response_ids[
                call.response_start : call.response_start + call.completion_tokens
            ]
            ends[call.chain_id] = call.response_start + call.completion_tokens
        versions = (
            sorted(
                set(
                    chain.policy_versions[
                        call.response_start : call.response_start + len(output_ids)
                    ]
                )
                - {-1}
            )
            if not call.superseded
            else []
        )
        attributes = call.model_dump(exclude={"dropped_ids", "tool_calls", "started_at"})
        attributes["policy_versions"] = versions
        attributes["tool_calls"] = [asked["name"] for asked in call.tool_calls]
        name = f"model call {call.index}"
        if call.superseded:
            name += " (rolled back)"
        elif call.continuation != "append":
            name += f" ({call.continuation} chain {call.chain_id})"
        yield _Span(
            name=name,
            kind="CHAT_MODEL",
            start_s=call.started_at,
            end_s=call.started_at + call.latency_s,
            inputs={"context": clip(context)},
            outputs={"completion": clip(tokenizer.decode(output_ids))},
            attributes=attributes,
        )
