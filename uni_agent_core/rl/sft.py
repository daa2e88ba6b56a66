"""Supervised warm start from gold trajectories (before RL, when a policy cannot yet act).

A tiny policy rarely emits a well-formed tool call, so RL has no successful episode to
reinforce. The warm start shows it the gold actions in the exact token stream it will be
trained and served on:

1. `gold_actions(task, base_file)`: the tool calls that solve a task whose gold patch changes
   one block of consecutive lines of one file — an `editor` `view` of the file (only the edited
   lines when the statement names the block's line number, the whole file otherwise), a
   `str_replace` of those lines as the view showed them, then `submit` — written in the
   gateway's hermes tool-call syntax. The view makes the edit learnable: the policy is taught to
   copy the lines it was shown, not to recall them. The edited lines are the changed ones,
   grown by whole neighbouring lines until they occur once in the file (the editor refuses an
   ambiguous `old_str`, and two functions of a file often share a line such as
   `return value`); a pure insertion is anchored on the line it goes before.
2. `gold_trajectories(recipe, tasks)`: each task's episode run through the real stack (gateway,
   ReAct harness, sandbox, verifier) with a `ScriptedEngine` that replies with those calls; only
   episodes the verifier scores as resolved are kept. The gateway records the tokens, so the
   trajectories are what the policy would have had to sample, token for token.
3. `supervised_warm_start(model, trajectories)`: AdamW on the negative log-likelihood of the
   sampled (mask 1) tokens, in micro-batches by token budget (counted after the prompt prefix
   the rows share, which runs once per micro-batch with exact gradients, as in the RL
   trainer); context tokens carry no loss.

Tasks whose gold patch touches several files or several places (micro-swe L3, most real SWE
tasks) have no gold action here and are skipped.
"""

from __future__ import annotations

import functools
import json
import random
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.patches import BlockChange, single_block_change
from uni_agent_core.envs.workspace import base_file_on_host
from uni_agent_core.progress import ProgressLines
from uni_agent_core.rl.batch import TrajectoryBatch, trajectories_to_batch
from uni_agent_core.rl.precision import ComputeCopy, ComputeDtype
from uni_agent_core.rl.prefix_forward import SharedPrefix, row_logprobs, rows_prefix_length
from uni_agent_core.rl.trainer import micro_batches
from uni_agent_core.tools.editor import occurrences
from uni_agent_core.types import TaskSpec, Trajectory

PROGRESS_EVERY_S = 30.0
"""The longest a fit goes without a progress line."""


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One hermes-style tool call, as the gateway parses it from sampled text."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def gold_actions(task: TaskSpec, base_file: str | None = None) -> list[str] | None:
    """View the edited lines, replace them, submit; None for patches of several places.

    Args:
        task: the task; its gold patch must change one block of lines of one file.
        base_file: that file at the base commit. Without it, uniqueness is judged on the lines
            the patch's hunk shows, so the edit may still be ambiguous in the whole file.

    Returns:
        The three tool calls, or None when the patch is not one block of one file or no block
        of whole lines around the change occurs once in the file.

    Raises:
        ValueError: the gold patch's removed lines are not in `base_file` where it says.
    """
    change = single_block_change(task.patch)
    if change is None:
        return None
    if base_file is None:
        known = "\n".join(change.hunk_old)
        lines = dict(enumerate(change.hunk_old, change.hunk_start))
    else:
        known = base_file
        numbered = base_file.split("\n")
        if numbered[-1] == "":  # the file's final newline ends its last line; no line follows
            numbered.pop()
        lines = dict(enumerate(numbered, 1))
        replaced = numbered[change.line - 1 : change.line - 1 + len(change.old)]
        if replaced != list(change.old) or not 1 <= change.line <= len(numbered) + 1:
            raise ValueError(
                f"task {task.instance_id}: its gold patch does not apply to {change.path} at "
                f"line {change.line}; the file given is not the one the patch was made against"
            )
    edit = _unique_edit(change, lines, known)
    if edit is None:
        return None
    first, last, old_str, new_str = edit
    view: dict[str, Any] = {"command": "view", "path": change.path}
    if re.search(rf"\bline {change.line}\b", task.problem_statement):
        view["view_range"] = [first, last]
    replace = {"command": "str_replace", "path": change.path, "old_str": old_str}
    return [
        tool_call("editor", view),
        tool_call("editor", {**replace, "new_str": new_str}),
        tool_call("submit", {}),
    ]


def _unique_edit(
    change: BlockChange, lines: dict[int, str], text: str
) -> tuple[int, int, str, str] | None:
    """`(first, last, old_str, new_str)`: the smallest window of lines `first..last` around the
    change (growing upwards and downwards in turn) whose text, less the first line's
    indentation, occurs once in `text`; None when even the widest window is ambiguous."""
    first, last = change.line, change.line + len(change.old) - 1
    if not change.old or not change.new:
        # a str_replace of nothing, or by nothing, would leave a line or its newline behind
        if last + 1 in lines:
            last += 1
        elif first - 1 in lines:
            first -= 1
        else:
            return None
    upwards = True
    while True:
        old = [lines[n] for n in range(first, last + 1)]
        before = [lines[n] for n in range(first, change.line)]
        after = [lines[n] for n in range(change.line + len(change.old), last + 1)]
        new = [*before, *change.new, *after]
        indent = old[0][: len(old[0]) - len(old[0].lstrip())]
        if new[0].startswith(indent):
            old[0], new[0] = old[0][len(indent) :], new[0][len(indent) :]
        old_str, new_str = "\n".join(old), "\n".join(new)
        if len(occurrences(text, old_str)) == 1:
            return first, last, old_str, new_str
        can_up, can_down = first - 1 in lines, last + 1 in lines
        if not can_up and not can_down:
            return None
        if can_up and (upwards or not can_down):
            first -= 1
        else:
            last += 1
        upwards = not upwards


async def gold_trajectories(
    recipe: Recipe, tasks: Sequence[TaskSpec], *, echo: Callable[[str], None] = print
) -> list[Trajectory]:
    """Resolved gold episodes of `tasks` through the recipe's gateway, harness and sandbox."""
    from uni_agent_core.gateway.embedded import serving_gateway
    from uni_agent_core.inference.scripted import ScriptedEngine
    from uni_agent_core.rollout.build import build_session_manager, build_tokenizer
    from uni_agent_core.rollout.driver import RolloutDriver

    tokenizer = build_tokenizer(recipe)
    engine = ScriptedEngine(tokenizer)
    manager = build_session_manager(recipe, engine, tokenizer)
    kept: list[Trajectory] = []
    resolved = several_places = ambiguous = unresolved = 0
    progress = ProgressLines("gold", sys.stderr, unit="tasks")
    async with serving_gateway(manager) as url:
        driver = RolloutDriver.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=1
        )
        for done, task in enumerate(tasks, start=1):
            change = single_block_change(task.patch)
            if change is None:
                several_places += 1
                continue
            actions = gold_actions(task, base_file_on_host(task, change.path))
            if actions is None:
                ambiguous += 1
                continue
            engine.requests.clear()
            engine.replies = dict(enumerate(actions))
            result = await driver.episode(task, 0, seed=0)
            progress.line(done, len(tasks), task.instance_id, f"reward {result.reward:g}", False)
            if not result.resolved:
                unresolved += 1
                continue
            resolved += 1
            kept.extend(t for t in result.trajectories if t.trainable_tokens)
    why = f"{several_places} without gold actions: their gold patch changes several places"
    if ambiguous:
        why += f"; {ambiguous} whose changed lines are not unique in the file, however widened"
    echo(
        f"gold trajectories: {resolved} resolved of {len(tasks)} tasks "
        f"({why}; {unresolved} not resolved)"
    )
    return kept


@dataclass
class WarmStartReport:
    """What the warm start did."""

    trajectories: int
    epochs: int
    loss_by_epoch: list[float]
    seconds: float
    loss_by_step: list[float] = field(default_factory=list)
    """The NLL per sampled token of each optimizer step (one per micro-batch), in order."""


def supervised_warm_start(
    model: Any,
    trajectories: Sequence[Trajectory],
    *,
    epochs: int = 2,
    lr: float = 5e-5,
    micro_batch_tokens: int = 4096,
    pad_token_id: int = 0,
    seed: int = 0,
    compute_dtype: ComputeDtype = "float32",
    echo: Callable[[str], None] = print,
) -> WarmStartReport:
    """Fit `model` to the sampled tokens of `trajectories` (one optimizer step per micro-batch).

    With a `bfloat16` `compute_dtype` the forward and backward passes run on a bf16 copy and
    AdamW steps `model`'s float32 weights (`precision.ComputeCopy`, as in the RL trainer).

    Raises:
        ValueError: no trajectory has a trainable token.
    """
    rows = [t for t in trajectories if t.trainable_tokens]
    if not rows:
        raise ValueError("no gold trajectory with trainable tokens to warm-start on")
    device = next(model.parameters()).device
    precision = ComputeCopy(model, compute_dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    order = list(range(len(rows)))
    rng = random.Random(seed)
    losses: list[float] = []
    steps: list[float] = []
    started = time.perf_counter()
    progress = FitProgress(len(rows) * epochs, echo)
    for epoch in range(epochs):
        rng.shuffle(order)
        batch = trajectories_to_batch([rows[i] for i in order], pad_token_id=pad_token_id)
        lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
        shared = rows_prefix_length(batch, range(batch.size))
        total, count = 0.0, 0
        for group in micro_batches([n - shared for n in lengths], micro_batch_tokens):
            optimizer.zero_grad(set_to_none=True)
            precision.zero_grad()
            on_rows = functools.partial(progress.advance, where=f"epoch {epoch + 1}")
            steps.append(_nll_backward(precision.model, batch, group, device, on_rows))
            precision.grads_to_master()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            precision.refresh()
            total += steps[-1] * len(group)
            count += len(group)
        losses.append(total / count)
        echo(
            f"warm start epoch {epoch + 1}/{epochs}: nll {losses[-1]:.4f} per sampled token "
            f"({time.perf_counter() - started:.0f} s)"
        )
    optimizer.zero_grad(set_to_none=True)
    return WarmStartReport(len(rows), epochs, losses, time.perf_counter() - started, steps)


class FitProgress:
    """A progress line at most every `every_s` seconds of a fit: trajectories done of all
    epochs', tokens per second and the ETA (`warm start: epoch 1, 24/96 trajectories, ...`)."""

    def __init__(
        self, total: int, echo: Callable[[str], None], every_s: float = PROGRESS_EVERY_S
    ) -> None:
        self.total, self.echo, self.every_s = total, echo, every_s
        self.done = self.tokens = 0
        self.started = self.printed = time.perf_counter()

    def advance(self, rows: int, tokens: int, where: str) -> None:
        self.done += rows
        self.tokens += tokens
        now = time.perf_counter()
        if now - self.printed < self.every_s or self.done >= self.total:
            return
        self.printed = now
        elapsed = now - self.started
        eta = elapsed / self.done * (self.total - self.done)
        self.echo(
            f"warm start: {where}, {self.done}/{self.total} trajectories, "
            f"{self.tokens / elapsed:.0f} tokens/s, ETA {eta:.0f} s"
        )


def _nll_backward(
    model: Any,
    batch: TrajectoryBatch,
    rows: list[int],
    device: Any,
    on_rows: Callable[[int, int], None] = lambda rows, tokens: None,
) -> float:
    """Gradients of the mean NLL of the sampled tokens of `rows` (accumulated into `model`);
    returns that NLL. Their shared prefix runs once; on a CPU each row then runs alone (no
    padding; batching rows was slower there), its loss scaled by the micro-batch's token count,
    so the gradients are those of the whole micro-batch. `on_rows(rows, tokens)` is called
    after each row's (or, off a CPU, the rows') backward: the fit's progress."""
    start = rows_prefix_length(batch, rows)
    prefix = SharedPrefix(model, batch.input_ids_B_T[rows[0], :start].to(device))
    tokens = float(batch.loss_mask_B_T[rows, start:].sum().clamp(min=1))
    chunks = [[row] for row in rows] if torch.device(device).type == "cpu" else [rows]
    total = 0.0
    for chunk in chunks:
        width = int(batch.attention_mask_B_T[chunk].sum(dim=1).max())
        mask = batch.loss_mask_B_T[chunk, :width].to(device)
        logprobs = row_logprobs(
            prefix,
            batch.input_ids_B_T[chunk, :width].to(device),
            batch.attention_mask_B_T[chunk, :width].to(device),
            mask,
        )
        loss = -(logprobs * mask[:, start:].float()).sum() / tokens
        loss.backward()
        total += float(loss.detach())
        on_rows(len(chunk), width)
    prefix.backward()
    return total


def save_policy(model: Any, tokenizer: Any, directory: Path) -> str:
    """Save a warm-started policy as a Hugging Face directory; returns its `hf:` policy name."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return f"hf:{directory.resolve()}"
