"""Does RL make SmolLM2-135M better at micro-swe? Held-out solve rate before and after training.

    python bench/rl_gain.py [--train-tasks 32] [--eval-tasks 24] [--sft-epochs 2] [--steps 3]

Phases, all on this machine, timed, in one process:

1. **base**: `recipes/smollm2-cpu.yaml`'s policy (SmolLM2-135M-Instruct) on held-out micro-swe
   tasks of levels L0-L1 (a `heldout` split: bugs that never occur in training), greedy, one
   sample per task, through the real stack (HF engine, gateway, ReAct harness with `editor` and
   `submit`, bubblewrap sandboxes, hidden tests in a fresh sandbox).
2. **warm start** (reported separately, allowed by the issue): gold trajectories of the train
   tasks (`rl/sft.py`: view the file, the one-line gold edit, `submit`, run through the same
   stack with a scripted engine and kept only when the verifier resolves them), then supervised
   training on their sampled tokens; evaluated like the base.
3. **RL**: `--steps` steps of `trainer.mode: colocated_async` GRPO from the warm-started policy
   on the train tasks (L0-L1), then the final checkpoint evaluated like the base.

Printed: the solve rate of each phase with its delta to the base, the minutes each phase took,
and whether the target was met: after RL at least +10 points over the base with at most 45
minutes of training (gold trajectories, warm start and RL; the three evaluations only measure
and are timed apart).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMMON = [
    "harness.tools=[editor,submit]",
    "harness.max_turns=4",
    "harness.wall_clock_s=300",
    "gateway.sampling.max_tokens=128",
    "trainer.max_context_tokens=4096",
    "trainer.max_response_tokens=3072",
    "tasks.levels=[L0,L1]",
    "curriculum.enabled=false",
    "eval.k=1",
]


def load(overrides: list[str]):
    from uni_agent_core.config import load_recipe

    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    return load_recipe(
        ROOT / "recipes" / "smollm2-cpu.yaml",
        [*COMMON, f"sandbox.isolation={isolation}", *overrides],
    )


def solve_rate(recipe, suite: Path, run_dir: Path, checkpoint: str, label: str) -> float:
    from uni_agent_core.eval.commands import run_evaluation

    greedy = recipe.model_copy(deep=True)
    greedy.gateway.sampling.temperature = 0.0
    done = run_evaluation(
        greedy,
        suite=str(suite),
        checkpoint=checkpoint,
        k=1,
        out=str(run_dir / f"eval-{label}"),
        concurrency=8,
        run_dir=run_dir,
    )
    rate = done.summary.pass_at_1
    print(f"[{label}] held-out solve rate {rate:.3f} over {done.tasks} tasks", flush=True)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train-tasks", type=int, default=32)
    parser.add_argument("--eval-tasks", type=int, default=24)
    parser.add_argument("--sft-epochs", type=int, default=2)
    parser.add_argument("--sft-lr", type=float, default=5e-5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", help="working directory (default: a temporary one)")
    args = parser.parse_args()

    from uni_agent_core.envs.micro_swe.generator import generate, write_dataset
    from uni_agent_core.envs.sources import load_tasks
    from uni_agent_core.models import load_policy
    from uni_agent_core.rl.host_memory import release_host_memory
    from uni_agent_core.rl.run import TrainingRun
    from uni_agent_core.rl.sft import gold_trajectories, save_policy, supervised_warm_start

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench-rl-gain-"))
    suite = work / "heldout"
    write_dataset(generate(args.eval_tasks, args.seed, ["L0", "L1"], "heldout"), suite)
    train = [f"tasks.n={args.train_tasks}", f"tasks.seed={args.seed}"]
    minutes: dict[str, float] = {}
    rates: dict[str, float] = {}
    started = time.perf_counter()

    clock = time.perf_counter()
    base = load(train)
    rates["base"] = solve_rate(base, suite, work / "base", "none", "base")
    minutes["base"] = (time.perf_counter() - clock) / 60
    release_host_memory()  # one process runs every phase: give each phase's freed memory back

    clock = time.perf_counter()
    tasks = load_tasks(base.tasks)
    gold = asyncio.run(gold_trajectories(base, tasks))
    model, tokenizer = load_policy(base.policy.name, dtype="float32", device="cpu")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    report = supervised_warm_start(
        model, gold, epochs=args.sft_epochs, lr=args.sft_lr, pad_token_id=pad, seed=args.seed
    )
    policy = save_policy(model, tokenizer, work / "warm-start")
    del model
    release_host_memory()
    minutes["warm start (gold + SFT)"] = (time.perf_counter() - clock) / 60
    clock = time.perf_counter()
    warm = load([*train, f"policy.name={policy}"])
    rates["warm start"] = solve_rate(warm, suite, work / "warm", "none", "warm-start")
    minutes["warm-start eval"] = (time.perf_counter() - clock) / 60
    release_host_memory()

    clock = time.perf_counter()
    rl = load(
        [
            *train,
            f"policy.name={policy}",
            f"trainer.total_steps={args.steps}",
            f"trainer.checkpoint_interval={args.steps}",
            "trainer.resume=never",
        ]
    )
    run_dir = work / "rl"
    TrainingRun(
        rl, run_dir=run_dir, track=False, echo=lambda s: print(f"[rl] {s}", flush=True)
    ).run()
    minutes["RL"] = (time.perf_counter() - clock) / 60
    clock = time.perf_counter()
    rates["after RL"] = solve_rate(rl, suite, run_dir, "latest", "after-rl")
    minutes["final eval"] = (time.perf_counter() - clock) / 60
    total = (time.perf_counter() - started) / 60

    print()
    print(
        f"SmolLM2-135M, micro-swe L0-L1: {args.train_tasks} train tasks, {args.eval_tasks} "
        f"held-out tasks (greedy, 1 sample); warm start {report.trajectories} gold "
        f"trajectories x {args.sft_epochs} epochs (nll {report.loss_by_epoch}); RL {args.steps} "
        f"steps x {rl.trainer.batch_size} tasks x {rl.trainer.group_size} samples"
    )
    print(f"{'policy':<14}{'solve rate':>12}{'delta vs base':>16}")
    for name, rate in rates.items():
        print(f"{name:<14}{rate:>12.3f}{(rate - rates['base']) * 100:>+15.1f}pt")
    print(f"{'phase':<26}{'minutes':>9}")
    for name, value in minutes.items():
        print(f"{name:<26}{value:>9.1f}")
    print(f"{'total':<26}{total:>9.1f}")
    gain = (rates["after RL"] - rates["base"]) * 100
    training = minutes["warm start (gold + SFT)"] + minutes["RL"]
    met = gain >= 10 and training <= 45
    print(
        f"target (after RL >= base + 10 pt with <= 45 min of training, warm start included): "
        f"{'met' if met else 'missed'} ({gain:+.1f} pt after {training:.1f} min of training, "
        f"{total:.1f} min with the three evaluations; RL alone "
        f"{(rates['after RL'] - rates['warm start']) * 100:+.1f} pt over the warm start)"
    )
    print(f"work directory: {work}")


if __name__ == "__main__":
    main()
