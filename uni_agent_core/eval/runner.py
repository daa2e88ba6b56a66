"""A resumable checkpoint evaluation: every task K times, rows appended as samples finish.

`Evaluation` writes `eval.json` (what is being evaluated: the suite, the task ids, k, the
sampling settings and the sha256 of the weights, `weights_sha256`), appends one `SampleRow` per
finished sample to `samples.jsonl`, and on a rerun in the same directory skips every (task,
sample) already there, so an interrupted evaluation continues where it stopped. A directory whose
`eval.json` differs — other weights under the same checkpoint name (a run retrained with
`resume: false`), other tasks, other settings — holds a stale evaluation: it is moved aside to
`<dir>.stale` (one line says why) and the evaluation starts afresh, never reused.

Samples run through the training rollout stack (harness -> gateway -> sandbox -> verifier) with
the checkpoint's weights and seeds that depend only on (run seed, task, sample index) — not on
the weights — so two evaluations of one recipe (before and after RL) score the same tasks with
the same sampling seeds and compare pairwise (`eval/paired.py`); in oracle mode each task's gold
patch is scored with the verifier. The summary (`report.json`, `report.md`) is computed from all
rows.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.parallel import map_bounded
from uni_agent_core.envs.verifier import Verifier, close_sandboxes
from uni_agent_core.eval.metrics import EvalSummary, SampleRow, summarize
from uni_agent_core.eval.report import write_report
from uni_agent_core.progress import ProgressLines
from uni_agent_core.rollout.build import build_sandbox_factory
from uni_agent_core.rollout.driver import episode_seed
from uni_agent_core.rollout.stack import rollout_stack
from uni_agent_core.rundir.checkpoint import Checkpoint, checkpoint_digest, policy_weights_digest
from uni_agent_core.tracking.traces import EpisodeTracer
from uni_agent_core.types import RolloutResult, TaskSpec

SAMPLES = "samples.jsonl"
SPEC = "eval.json"
STALE_SUFFIX = ".stale"
"""Where a directory's stale evaluation is moved: `<dir>.stale` (the previous one replaced)."""
DIFF_ROW_CHARS = 2000
"""Characters of a sample's diff its row keeps (the flip table's `diff` column)."""
_EVAL_SEED_OFFSET = 1_000_003


def sample_seed(run_seed: int, task_id: str, sample_index: int) -> int:
    """The sampling seed of an evaluation sample: the same for every policy evaluated under one
    run seed, so the before and after evaluations of a run are paired sample by sample."""
    return episode_seed(run_seed + _EVAL_SEED_OFFSET, 0, task_id, sample_index)


def drop_torn_tail(path: Path) -> None:
    """Cut a partial last line (a writer killed mid-line) so appends start on a fresh line."""
    if not path.is_file():
        return
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        with path.open("r+b") as handle:
            handle.truncate(data.rfind(b"\n") + 1)


def read_rows(path: Path) -> list[SampleRow]:
    """Rows of a samples file; a torn last line (a killed writer) is ignored."""
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(SampleRow.model_validate_json(line))
        except ValueError:
            continue
    return rows


class Evaluation:
    """One evaluation of a policy (or of gold patches) on a task list."""

    def __init__(
        self,
        recipe: Recipe,
        tasks: list[TaskSpec],
        *,
        suite: str,
        k: int,
        out_dir: Path,
        checkpoint: Checkpoint | None = None,
        oracle: bool = False,
        concurrency: int | None = None,
        err: Any = None,
        served_as: tuple[str, int] | None = None,
        trace_run: str | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        temperature = recipe.eval.temperature
        if temperature is not None:
            recipe = recipe.model_copy(deep=True)
            recipe.gateway.sampling.temperature = temperature
        self.recipe = recipe
        self.tasks = tasks
        self.k = k
        self.out_dir = out_dir
        self.checkpoint = checkpoint
        self.oracle = oracle
        self.concurrency = recipe.eval.concurrency if concurrency is None else concurrency
        """Samples at once: `concurrency`, or the recipe's `eval.concurrency` when None."""
        self.err = err or sys.stderr
        self.trace_run = trace_run
        """The MLflow run its episodes are traced into (`tracking.traces`), or None."""
        self.version = int(checkpoint.state.get("version", 0)) if checkpoint else 0
        if served_as is not None:
            self.version = served_as[1]
        self.spec = {
            "suite": suite,
            "k": k,
            "tasks": [t.instance_id for t in tasks],
            "checkpoint": str(checkpoint.path) if checkpoint else None,
            "weights_sha256": self._weights_digest(checkpoint, oracle, served_as),
            "oracle": oracle,
            "policy": recipe.policy.name,
            "seed": recipe.seed,
            "temperature": recipe.gateway.sampling.temperature,
        }
        if served_as is not None:  # weights the serve stage's servers hold
            self.spec["served"] = served_as[0]

    def _weights_digest(
        self, checkpoint: Checkpoint | None, oracle: bool, served_as: tuple[str, int] | None
    ) -> str | None:
        """What the samples are drawn from, by content: the checkpoint's `model/`, else the
        policy's directory; None for gold patches, served weights (named by the serve stage)
        and built policies."""
        if oracle or served_as is not None:
            return None
        if checkpoint is not None:
            return checkpoint_digest(checkpoint)
        return policy_weights_digest(self.recipe.policy.name)

    def _check_spec(self) -> None:
        """Continue the evaluation in `out_dir` if it is this one; else move it aside."""
        path = self.out_dir / SPEC
        if path.is_file():
            existing = json.loads(path.read_text())
            if existing == self.spec:
                return
            changed = sorted(
                k for k in {*self.spec, *existing} if existing.get(k) != self.spec.get(k)
            )
            stale = self.out_dir.with_name(self.out_dir.name + STALE_SUFFIX)
            if stale.exists():
                shutil.rmtree(stale)
            self.out_dir.rename(stale)
            print(
                f"eval: {self.out_dir} held an evaluation of other {', '.join(changed)}; "
                f"moved it to {stale} and evaluating afresh",
                file=self.err,
            )
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.spec, indent=2) + "\n")

    async def run_async(self) -> EvalSummary:
        self._check_spec()
        samples = self.out_dir / SAMPLES
        drop_torn_tail(samples)
        done = {(row.task_id, row.sample_index) for row in read_rows(samples)}
        todo = [
            (task, index)
            for task in self.tasks
            for index in range(self.k)
            if (task.instance_id, index) not in done
        ]
        progress = ProgressLines("eval", self.err, unit="samples")
        levels = {task.instance_id: task.difficulty for task in self.tasks}
        started = time.perf_counter()

        with samples.open("a") as sink:

            def record(finished: int, total: int, row: SampleRow) -> None:
                sink.write(row.model_dump_json() + "\n")
                sink.flush()
                outcome = f"reward {row.reward:g} ({row.exit_reason})"
                progress.line(
                    finished,
                    total,
                    f"{row.task_id}#{row.sample_index}",
                    outcome,
                    row.error is not None,
                )

            if self.oracle:
                sandboxes = build_sandbox_factory(self.recipe)
                verifier = Verifier(sandboxes, self.recipe.reward)
                try:
                    await map_bounded(
                        todo,
                        lambda job: self._oracle(verifier, *job, levels),
                        concurrency=self.concurrency,
                        on_result=record,
                    )
                finally:
                    await close_sandboxes(sandboxes)
            else:
                weights = self.checkpoint.path / "model" if self.checkpoint else None
                async with rollout_stack(
                    self.recipe,
                    max_concurrency=self.concurrency,
                    weights=weights,
                    version=self.version,
                ) as stack:
                    tracer = None
                    if self.trace_run is not None:
                        tracer = EpisodeTracer.for_run(
                            self.trace_run,
                            self.recipe.tracking,
                            stack.manager.codec.tokenizer,
                            kind="eval",
                        )
                    episode = self._episode_fn(stack.driver.episode, levels, tracer)
                    await map_bounded(
                        todo,
                        lambda job: episode(*job),
                        concurrency=self.concurrency,
                        on_result=record,
                    )
        rows = [r for r in read_rows(samples) if r.sample_index < self.k]
        summary = summarize(rows, self.k)
        write_report(summary, self.out_dir, self.spec, time.perf_counter() - started)
        return summary

    async def _oracle(
        self, verifier: Verifier, task: TaskSpec, index: int, levels: dict[str, str | None]
    ) -> SampleRow:
        clock = time.perf_counter()
        verdict = await verifier.oracle(task)
        return SampleRow(
            task_id=task.instance_id,
            sample_index=index,
            reward=verdict.reward,
            resolved=verdict.resolved,
            exit_reason="oracle",
            level=levels[task.instance_id],
            seconds=time.perf_counter() - clock,
            error=verdict.error,
        )

    def _episode_fn(
        self,
        run: Callable[..., Any],
        levels: dict[str, str | None],
        tracer: EpisodeTracer | None = None,
    ) -> Callable[[TaskSpec, int], Any]:
        async def episode(task: TaskSpec, index: int) -> SampleRow:
            clock = time.perf_counter()
            seed = sample_seed(self.recipe.seed, task.instance_id, index)
            result: RolloutResult = await run(task, index, seed=seed)
            if tracer is not None:
                await asyncio.to_thread(tracer.trace_episode, result, step=self.version)
            return SampleRow(
                task_id=task.instance_id,
                sample_index=index,
                reward=result.reward,
                resolved=result.resolved,
                exit_reason=result.exit_reason.value,
                level=levels[task.instance_id],
                harness=result.harness or None,
                task_env=result.task_env or None,
                turns=result.turns,
                tokens=result.sampled_tokens,
                seconds=time.perf_counter() - clock,
                leak_flagged=result.leak_flagged,
                error=result.error,
                diff=result.diff[:DIFF_ROW_CHARS],
            )

        return episode
