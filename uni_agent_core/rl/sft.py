"""Supervised warm start from gold trajectories (before RL, when a policy cannot yet act).

A tiny policy rarely emits a well-formed tool call, so RL has no successful episode to
reinforce. The warm start shows it the gold actions in the exact token stream it will be
trained and served on:

1. `gold_actions(task)`: the tool calls that solve a task whose gold patch changes one line —
   an `editor` `view` of the file (only the buggy line when the statement names its number, the
   whole file otherwise), a `str_replace` of that line as the view showed it, then `submit` —
   written in the gateway's hermes tool-call syntax. The view makes the edit learnable: the
   policy is taught to copy the line it was shown, not to recall it.
2. `gold_trajectories(recipe, tasks)`: each task's episode run through the real stack (gateway,
   ReAct harness, sandbox, verifier) with a `ScriptedEngine` that replies with those calls; only
   episodes the verifier scores as resolved are kept. The gateway records the tokens, so the
   trajectories are what the policy would have had to sample, token for token.
3. `supervised_warm_start(model, trajectories)`: AdamW on the negative log-likelihood of the
   sampled (mask 1) tokens, in micro-batches by token budget (counted after the prompt prefix
   the rows share, which runs once per micro-batch with exact gradients, as in the RL
   trainer); context tokens carry no loss.

Tasks with multi-line or multi-file gold patches (micro-swe L3, most real SWE tasks) have no
gold action here and are skipped.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.envs.patches import single_line_change
from uni_agent_core.rl.batch import TrajectoryBatch, trajectories_to_batch
from uni_agent_core.rl.prefix_forward import SharedPrefix, row_logprobs, rows_prefix_length
from uni_agent_core.rl.trainer import micro_batches
from uni_agent_core.types import TaskSpec, Trajectory


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One hermes-style tool call, as the gateway parses it from sampled text."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def gold_actions(task: TaskSpec) -> list[str] | None:
    """View the file, replace the one line of the gold patch, submit; None for other patches."""
    change = single_line_change(task.patch)
    if change is None:
        return None
    view: dict[str, Any] = {"command": "view", "path": change.path}
    if re.search(rf"\bline {change.line}\b", task.problem_statement):
        view["view_range"] = [change.line, change.line]
    edit = {
        "command": "str_replace",
        "path": change.path,
        "old_str": change.old.strip(),
        "new_str": change.new.strip(),
    }
    return [tool_call("editor", view), tool_call("editor", edit), tool_call("submit", {})]


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
    skipped = unresolved = 0
    async with serving_gateway(manager) as url:
        driver = RolloutDriver.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=1
        )
        for task in tasks:
            actions = gold_actions(task)
            if actions is None:
                skipped += 1
                continue
            engine.requests.clear()
            engine.replies = dict(enumerate(actions))
            result = await driver.episode(task, 0, seed=0)
            if not result.resolved:
                unresolved += 1
                continue
            kept.extend(t for t in result.trajectories if t.trainable_tokens)
    echo(
        f"gold trajectories: {len(kept)} resolved of {len(tasks)} tasks "
        f"({skipped} without a one-line gold patch, {unresolved} not resolved)"
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
    echo: Callable[[str], None] = print,
) -> WarmStartReport:
    """Fit `model` to the sampled tokens of `trajectories` (one optimizer step per micro-batch).

    Raises:
        ValueError: no trajectory has a trainable token.
    """
    rows = [t for t in trajectories if t.trainable_tokens]
    if not rows:
        raise ValueError("no gold trajectory with trainable tokens to warm-start on")
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    order = list(range(len(rows)))
    rng = random.Random(seed)
    losses: list[float] = []
    steps: list[float] = []
    started = time.perf_counter()
    for epoch in range(epochs):
        rng.shuffle(order)
        batch = trajectories_to_batch([rows[i] for i in order], pad_token_id=pad_token_id)
        lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
        shared = rows_prefix_length(batch, range(batch.size))
        total, count = 0.0, 0
        for group in micro_batches([n - shared for n in lengths], micro_batch_tokens):
            optimizer.zero_grad(set_to_none=True)
            steps.append(_nll_backward(model, batch, group, device))
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            total += steps[-1] * len(group)
            count += len(group)
        losses.append(total / count)
        echo(
            f"warm start epoch {epoch + 1}/{epochs}: nll {losses[-1]:.4f} per sampled token "
            f"({time.perf_counter() - started:.0f} s)"
        )
    optimizer.zero_grad(set_to_none=True)
    return WarmStartReport(len(rows), epochs, losses, time.perf_counter() - started, steps)


def _nll_backward(model: Any, batch: TrajectoryBatch, rows: list[int], device: Any) -> float:
    """Gradients of the mean NLL of the sampled tokens of `rows` (accumulated into `model`);
    returns that NLL. Their shared prefix runs once; on a CPU each row then runs alone (no
    padding; batching rows was slower there), its loss scaled by the micro-batch's token count,
    so the gradients are those of the whole micro-batch."""
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
    prefix.backward()
    return total


def save_policy(model: Any, tokenizer: Any, directory: Path) -> str:
    """Save a warm-started policy as a Hugging Face directory; returns its `hf:` policy name."""
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return f"hf:{directory.resolve()}"
