"""Does RL make SmolLM2-135M better at micro-swe? Held-out solve rates before and after RL.

    python bench/rl_gain.py [--train-tasks 48] [--rl-tasks 48] [--eval-tasks 96] [--base-tasks 24]
                            [--levels L0] [--sft-epochs 2] [--sft-lr 2e-5] [--steps 8]
                            [--eval-concurrency 48] [--set KEY=VALUE ...] [--work DIR]
                            [--json PATH] [--time-budget-s S]

All phases run on this machine, timed, in one process, through the real stack (HF engine,
gateway, ReAct harness with `editor` and `submit`, bubblewrap sandboxes, hidden tests in a
fresh sandbox), in the setting of `bench/_smollm2_rl.py`:

1. **base**: SmolLM2-135M-Instruct, greedy, one sample per task, on the first `--base-tasks`
   of a held-out suite (micro-swe `heldout` split of `--levels`: bugs never trained on).
2. **warm start**: the recipe's `warm_start` stage (`rl/warm_start.py`): the gold episodes of
   the `--train-tasks` training tasks, then `--sft-epochs` of NLL fitting; evaluated like the
   base on all `--eval-tasks`.
3. **RL**: `--steps` steps of `colocated_async` GRPO from the warm-started policy on the
   `--rl-tasks` training tasks after those (`warm_start.rl_tasks: rest`: problems whose answer
   the policy was not shown), or with `--rl-tasks 0` on the warm start's own tasks (`--set`
   overrides the recipe: lr, group size, temperature, loss, ...), then the final checkpoint
   evaluated on the same `--eval-tasks`.

With `--time-budget-s`, RL gets what the budget leaves after the evaluations before it, less a
reserve for the evaluation after it (the warm-start evaluation's time, plus a quarter): it ends
at a step boundary, checkpointed, rather than run past that (`TrainingRun(time_budget_s=)`), and
the after-RL evaluation takes the last checkpoint. A machine lent for minutes (`bench/gpu/`)
then still gets a complete before → after.

Printed: the solve rate of each phase, overall and per level; the RL-only delta (after RL
minus warm start) with a paired bootstrap 95% interval over the held-out tasks; the minutes
of each phase; the RL steps trained, the rollout's sampled tokens per second of rollout and
the trainer's loss tokens per second of training; and whether the target is met: an RL-only
delta >= +10 points whose interval's lower bound is above 0, in <= 15 minutes of RL.
`curves.png` in the work directory plots the RL steps' train reward, pass rate, response
length and grad norm.

A killed run continues where it stopped when started again with the same `--work`: the warm
start is reused, evaluations skip finished samples, and RL resumes from its checkpoint. The
minutes of a phase are summed over the runs that worked on it (`phases.json` in the work
directory), so a phase reused from an earlier run keeps the time it took then; the time of a
phase killed before it finished is lost.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from _smollm2_rl import load

RL_MINUTES = 15
"""The target's bound on the minutes of RL."""

RL_SETTING = [
    "policy.dtype=bfloat16",
    "engine.max_batch_size=48",
    "reward.unfinished=zero",
    "trainer.lr=1e-5",
    "trainer.lr_warmup_steps=2",
    "trainer.group_size=8",
    "trainer.batch_size=2",
    "trainer.checkpoint_interval=4",
    "curriculum.refill_flat_groups=2",
    "gateway.sampling.temperature=0.6",
]
"""The RL setting of the measured run (`bench/README.md`, "RL gain"); `--set` overrides it.
The demo's regime: bf16 compute, an engine batch that holds a 48-task evaluation at once,
episodes that end without submitting scored 0. Sampling at 0.6, not 1.0: a warm-started 135M
policy solves few tasks by sampling at 1.0, so most groups would be flat."""

CURVES = (
    "train/reward_mean",
    "train/pass_rate",
    "train/response_tokens_mean",
    "train/grad_norm",
)


def evaluate(
    recipe, suite: Path, work: Path, label: str, checkpoint: str, tasks: int, concurrency: int
):
    """Greedy held-out evaluation; returns the summary and each task's solve rate."""
    from uni_agent_core.eval.evaluate import run_evaluation

    greedy = recipe.model_copy(deep=True)
    greedy.eval.temperature = 0.0
    done = run_evaluation(
        greedy,
        suite=str(suite),
        checkpoint=checkpoint,
        k=1,
        out=str(work / f"eval-{label}"),
        max_tasks=tasks,
        concurrency=concurrency,
        run_dir=work / "rl",
    )
    per_task: dict[str, list[float]] = {}
    for line in (done.out_dir / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        per_task.setdefault(row["task_id"], []).append(float(row["resolved"]))
    solved = {task: sum(v) / len(v) for task, v in per_task.items()}
    levels = ", ".join(
        f"{level} {scores['pass@1']:.3f}" for level, scores in sorted(done.summary.by_level.items())
    )
    print(
        f"[{label}] held-out solve rate {done.summary.pass_at_1:.3f} over {done.tasks} tasks "
        f"({levels})",
        flush=True,
    )
    return done.summary, solved


def rl_throughput(metrics: Path) -> dict[str, float]:
    """Steps trained, sampled tokens per second of rollout and loss tokens per second of
    training, over the steps of `metrics.jsonl` (each step's sums, not a mean of rates)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]

    def total(key: str) -> float:
        return sum(float(row.get(key, 0.0)) for row in rows)

    return {
        "steps": len(rows),
        "rollout_tokens_per_s": total("perf/sampled_tokens") / max(total("perf/rollout_s"), 1e-9),
        "trained_tokens_per_s": total("train/trained_tokens") / max(total("perf/train_s"), 1e-9),
        "rollout_s": total("perf/rollout_s"),
        "train_s": total("perf/train_s"),
    }


def plot(metrics: Path, target: Path, policy: str) -> Path:
    from uni_agent_core.tracking.plots import plot_curves

    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    series = {"rl": {key: [(r["step"], r[key]) for r in rows if key in r] for key in CURVES}}
    return plot_curves(series, CURVES, target, f"{policy} micro-swe RL")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-tasks", type=int, default=48, help="tasks of the warm start")
    parser.add_argument(
        "--rl-tasks",
        type=int,
        default=48,
        help="further training tasks RL takes (0: RL on the warm start's own tasks)",
    )
    parser.add_argument("--eval-tasks", type=int, default=96)
    parser.add_argument("--base-tasks", type=int, default=24)
    parser.add_argument("--levels", default="L0")
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=2e-5)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-concurrency", type=int, default=48, help="episodes at a time")
    parser.add_argument("--set", action="append", default=[], help="recipe override for RL")
    parser.add_argument("--work", help="working directory (default: a temporary one)")
    parser.add_argument(
        "--json", help="also write the figures to this file (rewritten after each phase)"
    )
    parser.add_argument(
        "--time-budget-s",
        type=float,
        help="end RL early enough that the whole run fits in this many seconds",
    )
    args = parser.parse_args()
    started = time.monotonic()

    from uni_agent_core.envs.micro_swe.generator import generate, write_dataset
    from uni_agent_core.envs.micro_swe.keys import dataset_key
    from uni_agent_core.envs.sources import load_tasks
    from uni_agent_core.eval.metrics import paired_bootstrap_delta
    from uni_agent_core.host_memory import release_host_memory
    from uni_agent_core.rl.run import TrainingRun
    from uni_agent_core.rl.warm_start import rl_tasks, run_warm_start, warm_started

    levels = args.levels.split(",")
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-rl-gain-"))
    work.mkdir(parents=True, exist_ok=True)
    suite = work / "heldout"
    if not suite.exists():
        key = dataset_key(suite)
        heldout = generate(args.eval_tasks, args.seed, levels, "heldout", key=key)
        write_dataset(heldout, suite, key=key)
    base = load(
        [
            f"tasks.n={args.train_tasks + args.rl_tasks}",
            f"tasks.seed={args.seed}",
            f"tasks.levels=[{args.levels}]",
            "warm_start.enabled=true",
            f"warm_start.tasks={args.train_tasks}",
            f"warm_start.rl_tasks={'rest' if args.rl_tasks else 'all'}",
            f"warm_start.epochs={args.sft_epochs}",
            f"warm_start.lr={args.sft_lr}",
            f"trainer.total_steps={args.steps}",
            f"trainer.checkpoint_interval={args.steps}",
            "trainer.resume=auto",
            *RL_SETTING,
            *args.set,
        ]
    )
    minutes: dict[str, float] = {}
    summaries: dict = {}
    solved: dict[str, dict[str, float]] = {}

    spent_file = work / "phases.json"
    spent = json.loads(spent_file.read_text()) if spent_file.exists() else {}

    def phase(name: str, clock: float) -> None:
        minutes[name] = spent.get(name, 0.0) + (time.perf_counter() - clock) / 60
        spent[name] = minutes[name]
        spent_file.write_text(json.dumps(spent, indent=2) + "\n")
        release_host_memory()  # one process runs every phase: give its freed memory back
        if args.json:  # what is known so far, should a later phase be killed
            figures = {"complete": False, "minutes": minutes}
            figures["solve_rate"] = {n: s.pass_at_1 for n, s in summaries.items()}
            Path(args.json).write_text(json.dumps(figures, indent=2))

    clock = time.perf_counter()
    summaries["base"], solved["base"] = evaluate(
        base, suite, work, "base", "none", args.base_tasks, args.eval_concurrency
    )
    phase("base eval", clock)

    clock = time.perf_counter()
    train_tasks = load_tasks(base.tasks)
    warm = run_warm_start(base, work / "rl", train_tasks, track=False)
    phase("warm start (gold + SFT)", clock)
    rl = warm_started(base, warm)
    clock = time.perf_counter()
    summaries["warm start"], solved["warm start"] = evaluate(
        rl, suite, work, "warm-start", "none", args.eval_tasks, args.eval_concurrency
    )
    phase("warm-start eval", clock)

    clock = time.perf_counter()
    rl_budget = None
    if args.time_budget_s is not None:
        after_eval_s = 1.25 * minutes["warm-start eval"] * 60
        rl_budget = args.time_budget_s - (time.monotonic() - started) - after_eval_s
        if rl_budget <= 0:
            raise SystemExit(
                f"[rl] --time-budget-s {args.time_budget_s:.0f} leaves no time for RL "
                f"({rl_budget:.0f} s after the evaluation's reserve of {after_eval_s:.0f} s); "
                "phases so far: " + ", ".join(f"{n} {m:.1f} min" for n, m in minutes.items())
            )
        print(f"[rl] time budget {rl_budget:.0f} s", flush=True)
    rl_run = TrainingRun(
        rl,
        run_dir=work / "rl",
        track=False,
        echo=lambda s: print(f"[rl] {s}", flush=True),
        time_budget_s=rl_budget,
        tasks=rl_tasks(base, train_tasks),
    )
    rl_run.run()
    phase("RL", clock)
    throughput = rl_throughput(work / "rl" / "metrics.jsonl")
    clock = time.perf_counter()
    summaries["after RL"], solved["after RL"] = evaluate(
        rl, suite, work, "after-rl", "latest", args.eval_tasks, args.eval_concurrency
    )
    phase("after-RL eval", clock)
    total = sum(minutes.values())
    curves = plot(work / "rl" / "metrics.jsonl", work / "curves.png", base.policy.name)

    tasks = sorted(solved["warm start"])
    delta, low, high = paired_bootstrap_delta(
        [solved["after RL"][t] for t in tasks], [solved["warm start"][t] for t in tasks]
    )
    report = warm.report
    print()
    print(
        f"{base.policy.name}, micro-swe {args.levels}: {args.train_tasks} warm-start tasks, "
        f"RL on {f'{args.rl_tasks} others' if args.rl_tasks else 'the same'}; held-out "
        f"greedy, 1 sample: {args.base_tasks} tasks for the base, {args.eval_tasks} after; warm "
        f"start {report['trajectories']} gold trajectories x {report['epochs']} epochs (nll "
        f"{report['loss_by_epoch'][0]:.3f} -> {report['loss_by_epoch'][-1]:.3f}); RL "
        f"{throughput['steps']} of {rl.trainer.total_steps} steps x {rl.trainer.batch_size} "
        f"tasks x "
        f"{rl.trainer.group_size} samples, lr {rl.trainer.lr:g}, "
        f"{rl.trainer.algorithm.policy_loss}/{rl.trainer.algorithm.loss_agg_mode}"
    )
    all_levels = sorted({lv for s in summaries.values() for lv in s.by_level})
    header = f"{'policy':<12}{'tasks':>7}{'solve rate':>12}" + "".join(
        f"{lv:>8}" for lv in all_levels
    )
    print(header)
    for name, summary in summaries.items():
        per_level = "".join(
            f"{summary.by_level.get(lv, {}).get('pass@1', float('nan')):>8.3f}" for lv in all_levels
        )
        print(f"{name:<12}{summary.tasks:>7}{summary.pass_at_1:>12.3f}{per_level}")
    print(
        f"RL-only delta (after RL - warm start, {len(tasks)} paired tasks): "
        f"{delta * 100:+.1f} points, 95% paired bootstrap interval "
        f"[{low * 100:+.1f}, {high * 100:+.1f}]"
    )
    print(f"{'phase':<26}{'minutes':>9}")
    for name, value in minutes.items():
        print(f"{name:<26}{value:>9.1f}")
    print(f"{'total':<26}{total:>9.1f}")
    print(
        f"RL: {throughput['steps']} steps trained; rollout "
        f"{throughput['rollout_tokens_per_s']:.0f} sampled tokens/s of rollout, trainer "
        f"{throughput['trained_tokens_per_s']:.0f} loss "
        f"tokens/s of training"
    )
    met = delta >= 0.10 and low > 0 and minutes["RL"] <= RL_MINUTES
    print(
        f"target (RL-only delta >= +10 points, interval above 0, <= {RL_MINUTES} min of RL): "
        f"{'met' if met else 'MISSED'} ({delta * 100:+.1f} points, lower bound "
        f"{low * 100:+.1f}, {minutes['RL']:.1f} min of RL)"
    )
    print(f"curves: {curves}; work directory: {work}")
    if args.json:
        figures = {
            "complete": True,
            "rl": throughput,
            "solve_rate": {n: s.pass_at_1 for n, s in summaries.items()},
            "by_level": {n: s.by_level for n, s in summaries.items()},
            "rl_delta": delta,
            "rl_delta_interval": [low, high],
            "minutes": minutes,
            "warm_start": report,
            "met": met,
        }
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
