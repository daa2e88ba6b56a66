"""Benchmark the training modes on the same work: sync, colocated_async, separate_async.

    python bench/async_modes.py [--steps 6] [--batch 2] [--group 2] [--latency-median 3.0]

Each mode trains the `tiny` policy for `--steps` steps of `--batch` micro-swe tasks (L0-L1) x
`--group` samples, so every mode runs the same number of episodes through the real stack
(HF engine, in-loop gateway, ReAct harness, bubblewrap sandboxes, verifier). Two things are
injected, and only here:

- long-tailed sandbox time: before its first command each episode waits a lognormal delay
  (median `--latency-median` s, sigma `--latency-sigma`, seeded per episode, identical in every
  mode), standing in for image pulls, installs and slow test suites;
- the reward: the random `tiny` policy never solves a task, which would leave every group flat
  and nothing to train; the reward is the parity of the episode's sampled token ids (the test
  suite's `ParityRewardDriver`), so the trainer really updates and pushes weights every step.

Modes: `sync`; `colocated_async` (partial rollout); `separate_async` with role switching (the
rollout replica never stops for training; the idle trainer lends its own model as a second
replica) and, for comparison, `separate_async` without role switching.

Printed: wall clock, episodes/s and sampled tokens/s per mode, as ratios to `sync` measured in
the same run (this machine is noisy; compare ratios); then the router simulator's cluster model
of the same modes on 8 nodes of 8 H200s next to the published Uni-Agent figures
(`uni_agent_core/sim/async_rl.py`; `--no-cluster` skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support.parity_run import ParityRewardDriver  # noqa: E402

from uni_agent_core.config import load_recipe  # noqa: E402
from uni_agent_core.rl.run import TrainingRun  # noqa: E402
from uni_agent_core.types import RolloutResult, TaskSpec  # noqa: E402


def _latency_driver(median: float, sigma: float) -> type[ParityRewardDriver]:
    class LongTailDriver(ParityRewardDriver):
        async def _episode(self, task: TaskSpec, sample_index: int, seed: int) -> RolloutResult:
            rng = random.Random(zlib.crc32(f"{task.instance_id}/{sample_index}".encode()))
            await asyncio.sleep(median * rng.lognormvariate(0.0, sigma))
            return await super()._episode(task, sample_index, seed)

    return LongTailDriver


MODES: dict[str, list[str]] = {
    "sync": ["trainer.mode=sync"],
    "colocated_async": ["trainer.mode=colocated_async"],
    "separate_async": ["trainer.mode=separate_async"],
    "separate (no switch)": [
        "trainer.mode=separate_async",
        "trainer.backend.role_switching=false",
    ],
}
"""Row label -> recipe overrides."""


def run_mode(mode: str, args: argparse.Namespace, work: Path) -> dict[str, float]:
    overrides = [
        *MODES[mode],
        f"trainer.total_steps={args.steps}",
        f"trainer.batch_size={args.batch}",
        f"trainer.group_size={args.group}",
        f"trainer.max_concurrent_episodes={args.batch * args.group * 2}",
        "trainer.lr=1e-4",
        "trainer.resume=never",
        "trainer.checkpoint_interval=1000",
        "tasks.n=16",
        "tasks.levels=[L0,L1]",
        "harness.max_turns=3",
        "gateway.sampling.max_tokens=64",
        f"sandbox.isolation={'bubblewrap' if shutil.which('bwrap') else 'none'}",
        "engine.max_batch_size=16",
    ]
    if mode != "sync":
        overrides.append("trainer.staleness.max_versions=1")
    slug = mode.replace(" ", "-").replace("(", "").replace(")", "")
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", overrides)
    run = TrainingRun(
        recipe,
        run_dir=work / slug,
        echo=lambda line: print(f"  [{mode}] {line}", flush=True),
        driver_class=_latency_driver(args.latency_median, args.latency_sigma),
    )
    started = time.perf_counter()
    summary = run.run()
    wall = time.perf_counter() - started
    episodes = sum(row.get("train/episodes", 0.0) for row in summary.metrics)
    tokens = sum(
        row.get("train/episodes", 0.0) * row.get("train/response_tokens_mean", 0.0)
        for row in summary.metrics
    )
    return {
        "wall_s": wall,
        "episodes": episodes,
        "episodes_per_s": episodes / wall,
        "tokens_per_s": tokens / wall,
        "staleness_max": max(r.get("train/staleness_max", 0.0) for r in summary.metrics),
        "multi_version": max(r.get("train/multi_version_frac", 0.0) for r in summary.metrics),
        "trainer_lent_s": sum(r.get("perf/trainer_lent_s", 0.0) for r in summary.metrics),
        "trainer_tokens": sum(
            r.get("rollout/trainer_replica_tokens", 0.0) for r in summary.metrics
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--group", type=int, default=2)
    parser.add_argument("--latency-median", type=float, default=3.0)
    parser.add_argument("--latency-sigma", type=float, default=1.0)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--no-cluster", action="store_true", help="skip the 8-node model")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-async-"))
    results: dict[str, dict[str, float]] = {}
    try:
        for mode in dict.fromkeys(["sync", *args.modes]):
            print(f"running {mode} ...", flush=True)
            results[mode] = run_mode(mode, args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = results["sync"]
    print()
    print(
        f"{args.steps} steps x {args.batch} tasks x {args.group} samples per mode; injected "
        f"sandbox latency lognormal(median {args.latency_median:g}s, sigma {args.latency_sigma:g})"
    )
    header = (
        f"{'mode':<22}{'wall s':>9}{'episodes':>10}{'ep/s':>8}{'tok/s':>8}"
        f"{'speed-up':>10}{'thru x':>8}{'stale max':>11}{'multi-ver':>11}"
        f"{'lent s':>8}{'lent tok':>10}"
    )
    print(header)
    print("-" * len(header))
    for mode, row in results.items():
        print(
            f"{mode:<22}{row['wall_s']:>9.1f}{row['episodes']:>10.0f}{row['episodes_per_s']:>8.2f}"
            f"{row['tokens_per_s']:>8.0f}{base['wall_s'] / row['wall_s']:>9.2f}x"
            f"{row['tokens_per_s'] / base['tokens_per_s']:>7.2f}x"
            f"{row['staleness_max']:>11.0f}{row['multi_version']:>11.2f}"
            f"{row['trainer_lent_s']:>8.1f}{row['trainer_tokens']:>10.0f}"
        )
    if not args.no_cluster:
        print_cluster_model()


def print_cluster_model() -> None:
    """The same modes on a simulated 8-node cluster, next to Uni-Agent's published figures."""
    from uni_agent_core.sim.async_rl import format_table, reproduce_uni_agent

    print()
    print(format_table(reproduce_uni_agent()))


if __name__ == "__main__":
    main()
