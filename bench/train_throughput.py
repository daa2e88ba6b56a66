"""How fast does the embedded trainer train one real step? Reference, fast and bf16 paths.

    python bench/train_throughput.py [--tasks 4] [--group-size 4] [--repeats 2]
                                     [--episodes PATH] [--record]

1. **Episodes**: one step's batch of real SmolLM2-135M micro-swe episodes, `--tasks` tasks x
   `--group-size` samples, rolled out through `recipes/smollm2-cpu.yaml`'s stack (HF engine,
   gateway, ReAct harness, bubblewrap sandboxes, verifier) in the RL setting of
   `bench/rl_gain.py` (`bench/_smollm2_rl.py`: editor + submit, 4 turns of <= 128 tokens).
   They are recorded once to `--episodes` (default
   `$AGENT_RL_CACHE/bench/train-throughput-<tasks>x<group>.json`) and reused; `--record`
   records them again. The recorded rewards are replaced by 1, 0, 1, 0, ... within each group
   so that every group trains (a flat group would be dropped; what a step costs does not
   depend on the reward values).
2. **Steps**: the recipe's trainer (its `micro_batch_tokens`, loss, AdamW) trains that batch
   `--repeats` times on the reference path (`trainer.backend.shared_prefix: false`: a no-grad
   forward for the old logprobs, then every row in full with the LM head at every position)
   on the fast path (the step's shared prefix once with exact gradients, old logprobs from
   the same forward, the head at loss positions only) and on the fast path in mixed precision
   (`policy.dtype: bfloat16`: forward and backward on a bf16 copy, float32 master weights and
   AdamW state, `rl/precision.py`), each from the same initial weights, in this process,
   alternating paths so that machine noise hits all three.
3. **Gradients** (`--no-check` skips it): one more step of each path on the first
   `--check-episodes` episodes (one group) with the optimizer step held back, and the relative
   difference of their gradients.

Also printed: the batch's FLOP model (`flop_ceiling`): multiply-accumulates of the reference
path and the least the fast path can do with exact gradients (every row's suffix, each shared
prefix once, the head at loss positions; backward = 2x forward), whose ratio bounds the
tokens/s speed-up that exact levers can reach on this batch. `--ceiling-only` prints it and stops.

Printed: per path, trained tokens/s (sampled tokens the loss covers / step seconds), step
seconds (the whole `train_step`: batch, forwards, backwards, clipping, AdamW), peak RSS during
its steps (VmHWM reset before each), and the ratios to the reference against the targets:
fast >= 3x tokens/s, >= 2x lower step seconds; bf16 >= 5x tokens/s; both with peak RSS no
higher. The bf16 path's `logprob_pearson` is against the recorded (float32) engine logprobs.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import statistics
import time
from pathlib import Path

from _smollm2_rl import RECIPE, load


def reset_peak_rss() -> None:
    """Reset the kernel's resident-set high-water mark of this process (Linux)."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    raise RuntimeError("no VmHWM in /proc/self/status")


async def record(recipe, tasks: int, group_size: int) -> list:
    from uni_agent_core.envs.sources import load_tasks
    from uni_agent_core.rollout.stack import rollout_stack

    chosen = load_tasks(recipe.tasks)[:tasks]
    async with rollout_stack(recipe, max_concurrency=tasks * group_size) as stack:
        groups = await asyncio.gather(
            *(
                stack.driver.group(task, group_size, run_seed=recipe.seed, step=index)
                for index, task in enumerate(chosen)
            )
        )
    return [result for group in groups for result in group]


def episodes(args: argparse.Namespace, recipe) -> list:
    from uni_agent_core.models.registry import cache_root
    from uni_agent_core.types import RolloutResult

    path = Path(
        args.episodes
        or cache_root() / "bench" / f"train-throughput-{args.tasks}x{args.group_size}.json"
    )
    if args.record or not path.is_file():
        print(f"recording {args.tasks} x {args.group_size} episodes with {RECIPE.name} ...")
        clock = time.perf_counter()
        results = asyncio.run(record(recipe, args.tasks, args.group_size))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps([r.model_dump(mode="json") for r in results]))
        print(f"recorded in {time.perf_counter() - clock:.0f} s -> {path}")
    results = [RolloutResult.model_validate(row) for row in json.loads(path.read_text())]
    by_group: dict[str, int] = {}
    alternated = []
    for result in results:
        index = by_group.setdefault(result.group_key, 0)
        by_group[result.group_key] = index + 1
        alternated.append(result.model_copy(update={"reward": float(index % 2 == 0)}))
    return alternated


def flop_ceiling(results: list, config) -> dict:
    """Multiply-accumulates of one step on each path, from the model's shapes.

    Reference: a no-grad forward for the old logprobs, then forward + backward (2x) of every
    row in full, the LM head at every position. Fast path's floor: the step's shared prefix
    once, each group's own prefix once (both as the trainer finds them,
    `prefix_forward.rows_prefix_length`), every row's suffix, the head at loss positions only,
    forward + backward. Counted: the linear layers, the attention scores and values (causal),
    the head; not the norms, activations, softmax or optimizer.
    """
    from uni_agent_core.rl.batch import trajectories_to_batch
    from uni_agent_core.rl.prefix_forward import rows_prefix_length

    hidden, layers = config.hidden_size, config.num_hidden_layers
    kv = config.num_key_value_heads * (hidden // config.num_attention_heads)
    body = layers * (2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * config.intermediate_size)
    head = hidden * config.vocab_size

    def attention(first: int, last: int) -> int:  # queries at positions first..last-1
        return layers * 2 * hidden * (last * (last + 1) - first * (first + 1)) // 2

    rows, groups = [], {}
    for result in results:
        for t in result.trajectories:
            if not result.abnormal and t.trainable_tokens:
                groups.setdefault(result.group_key, []).append(len(rows))
                rows.append(t)
    batch = trajectories_to_batch(rows, pad_token_id=0)
    lengths = batch.attention_mask_B_T.sum(dim=1).tolist()
    loss_tokens = batch.loss_mask_B_T.sum(dim=1).tolist()
    step = rows_prefix_length(batch, range(batch.size))
    fast = 3 * (step * body + attention(0, step))
    reference = 0
    for members in groups.values():
        shared = rows_prefix_length(batch, members)
        fast += 3 * ((shared - step) * body + attention(step, shared))
        for row in members:
            length = int(lengths[row])
            reference += 4 * (length * (body + head) + attention(0, length))
            fast += 3 * (
                (length - shared) * body + attention(shared, length) + int(loss_tokens[row]) * head
            )
    return {
        "reference_tmac": reference / 1e12,
        "fast_floor_tmac": fast / 1e12,
        "ceiling": reference / fast,
    }


PATHS: dict[str, tuple[bool, str]] = {
    "reference": (False, "float32"),
    "fast": (True, "float32"),
    "bf16": (True, "bfloat16"),
}
"""Path name -> (shared_prefix, compute dtype)."""


def make_trainer(model, recipe, pad: int, *, shared_prefix: bool, dtype: str = "float32"):
    from uni_agent_core.rl.trainer import EmbeddedTrainer

    backend = recipe.trainer.backend
    return EmbeddedTrainer(
        copy.deepcopy(model),
        recipe.trainer,
        pad_token_id=pad,
        micro_batch_tokens=backend.micro_batch_tokens,
        temperature=recipe.gateway.sampling.temperature or 1.0,
        shared_prefix=shared_prefix,
        compute_dtype=dtype,
    )


def timed_step(model, recipe, pad: int, results: list, *, path: str) -> dict:
    from uni_agent_core.host_memory import release_host_memory

    shared_prefix, dtype = PATHS[path]
    trainer = make_trainer(model, recipe, pad, shared_prefix=shared_prefix, dtype=dtype)
    release_host_memory()
    reset_peak_rss()
    clock = time.perf_counter()
    outcome = trainer.train_step(results)
    seconds = time.perf_counter() - clock
    peak = peak_rss_gib()
    assert outcome.updated, "the step trained nothing"
    del trainer
    release_host_memory()
    return {
        "seconds": seconds,
        "tokens": outcome.tokens,
        "peak_rss_gib": peak,
        "micro_batches": outcome.metrics["train/micro_batches"],
        "shared_prefix_tokens": outcome.metrics.get("train/shared_prefix_tokens", 0.0),
        "pearson": outcome.metrics.get("train/logprob_pearson", float("nan")),
    }


def gradients(model, recipe, pad: int, results: list, *, shared_prefix: bool):
    import torch

    trainer = make_trainer(model, recipe, pad, shared_prefix=shared_prefix)
    trainer.optimizer.step = lambda: None
    trainer.optimizer.zero_grad = lambda set_to_none=True: None
    trainer.train_step(results)
    grads = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
    del trainer
    gc.collect()
    return grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--episodes", help="recorded episodes (JSON); recorded when missing")
    parser.add_argument("--record", action="store_true", help="record the episodes again")
    parser.add_argument("--no-check", action="store_true", help="skip the gradient comparison")
    parser.add_argument("--check-episodes", type=int, default=4)
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument(
        "--paths",
        nargs="+",
        choices=list(PATHS),
        default=list(PATHS),
        help="the paths to time (the reference always; bf16 takes 10x float32's time on an "
        "AVX2-only CPU, where policy.dtype auto chooses float32)",
    )
    parser.add_argument(
        "--ceiling-only", action="store_true", help="print the batch's FLOP model and stop"
    )
    args = parser.parse_args()

    from uni_agent_core.host_cpu import describe_cpu
    from uni_agent_core.models import load_policy
    from uni_agent_core.models.precision_choice import choose_dtype

    recipe = load([f"trainer.group_size={args.group_size}", f"trainer.batch_size={args.tasks}"])
    print(f"CPU: {describe_cpu()}")
    # what `policy.dtype: auto` trains this policy in here, and why (models/precision_choice.py)
    print(choose_dtype(recipe.policy.name, echo=print).summary(), flush=True)
    results = episodes(args, recipe)
    model, tokenizer = load_policy(recipe.policy.name, dtype="float32")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    rows = [t for r in results if not r.abnormal for t in r.trajectories if t.trainable_tokens]
    if not rows:
        raise SystemExit(
            f"no trainable episode among the {len(results)} recorded ones (exits: "
            f"{sorted({r.exit_reason.value for r in results})}); record again with --record"
        )
    lengths = [len(t.prompt_ids) + len(t.response_ids) for t in rows]
    print(
        f"batch: {len(results)} episodes, {len(rows)} rows, {sum(lengths)} tokens "
        f"(rows {min(lengths)}-{max(lengths)}), {sum(t.trainable_tokens for t in rows)} sampled; "
        f"micro_batch_tokens {recipe.trainer.backend.micro_batch_tokens}"
    )
    flops = flop_ceiling(results, model.config)
    print(
        f"FLOP model: reference {flops['reference_tmac']:.2f} TMAC, the fast path's exact floor "
        f"{flops['fast_floor_tmac']:.2f} TMAC: exact levers reach at most {flops['ceiling']:.2f}x",
        flush=True,
    )
    if args.ceiling_only:
        return
    paths = ["reference", *(name for name in args.paths if name != "reference")]
    runs: dict[str, list[dict]] = {name: [] for name in paths}
    for repeat in range(args.repeats):
        for name in paths:
            run = timed_step(model, recipe, pad, results, path=name)
            runs[name].append(run)
            print(
                f"  repeat {repeat + 1} {name:<9} {run['seconds']:7.1f} s  "
                f"peak RSS {run['peak_rss_gib']:.2f} GiB  micro-batches {run['micro_batches']:.0f}",
                flush=True,
            )
    summary: dict = {"flops": flops}
    for name, values in runs.items():
        seconds = statistics.median(r["seconds"] for r in values)
        summary[name] = {
            "step_s": seconds,
            "tokens_per_s": values[0]["tokens"] / seconds,
            "peak_rss_gib": max(r["peak_rss_gib"] for r in values),
            "shared_prefix_tokens": values[0]["shared_prefix_tokens"],
            "pearson": values[0]["pearson"],
        }
    if not args.no_check:
        checked = results[: args.check_episodes]
        reference = gradients(model, recipe, pad, checked, shared_prefix=False)
        fast = gradients(model, recipe, pad, checked, shared_prefix=True)
        summary["gradient_relative_difference"] = float(
            (fast - reference).norm() / reference.norm()
        )
    ref = summary["reference"]
    print()
    prefix = summary.get("fast", ref)["shared_prefix_tokens"]
    print(
        f"embedded trainer, {RECIPE.name}: {len(results)} episodes ({args.tasks} tasks x "
        f"{args.group_size}), median of {args.repeats} steps per path, shared prefix "
        f"{prefix:.0f} tokens"
    )
    print(f"{'path':<12}{'trained tok/s':>15}{'step s':>10}{'peak RSS GiB':>14}{'pearson':>10}")
    for name in paths:
        row = summary[name]
        print(
            f"{name:<12}{row['tokens_per_s']:>15.1f}{row['step_s']:>10.1f}"
            f"{row['peak_rss_gib']:>14.2f}{row['pearson']:>10.4f}"
        )
    ratios = {
        name: (
            summary[name]["tokens_per_s"] / ref["tokens_per_s"],
            summary[name]["step_s"] / ref["step_s"],
            summary[name]["peak_rss_gib"] / ref["peak_rss_gib"],
        )
        for name in paths
        if name != "reference"
    }
    for name, (speedup, step, rss) in ratios.items():
        print(f"{name + '/ref':<12}{speedup:>14.2f}x{step:>9.2f}x{rss:>13.2f}x")
    if "gradient_relative_difference" in summary:
        print(
            f"gradients on {args.check_episodes} episodes: |fast - reference| / |reference| = "
            f"{summary['gradient_relative_difference']:.2e}"
        )
    if "fast" in ratios:
        speedup, step, rss = ratios["fast"]
        print(
            f"target trained tokens/s >= 3x: {speedup:.2f}x -> "
            f"{'met' if speedup >= 3 else 'MISSED'} "
            f"(this batch's exact FLOP ceiling: {flops['ceiling']:.2f}x)"
        )
        print(
            f"target step seconds >= 2x lower: {1 / step:.2f}x lower -> "
            f"{'met' if step <= 0.5 else 'MISSED'}"
        )
        print(f"target peak RSS no higher: {rss:.2f}x -> {'met' if rss <= 1.0 else 'MISSED'}")
    if "bf16" in ratios:
        speedup, _, rss = ratios["bf16"]
        print(
            f"target bf16 trained tokens/s >= 5x: {speedup:.2f}x -> "
            f"{'met' if speedup >= 5 else 'MISSED'}; bf16 peak RSS no higher: "
            f"{rss:.2f}x -> {'met' if rss <= 1.0 else 'MISSED'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
