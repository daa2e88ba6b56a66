"""Async RL on a simulated 8-node H200 cluster: sync, colocated, separate (+ role switching).

    python bench/async_cluster.py [--nodes 8] [--steps 8] [--seed 0] [--trainer-nodes N]
                                  [--tasks T] [--sweep-split] [--json [OUT]]

Runs `uni_agent_core.sim.async_rl` (see its docstring for the model, its constants and
their sources): the four training modes on the same episodes, an 8B policy on `--nodes` nodes of
8 H200s, `--tasks` GRPO groups of 8 SWE-like agent episodes per step (default 16 per node, i.e.
16 samples per GPU), `--steps` steps. Prints a markdown table (wall clock, samples/s, ratios to
sync and to separate, trainer idle fraction, rollout GPU utilisation, mean staleness) and one line
comparing the ratios with Uni-Agent's published figures (colocated -35.4% and separate -38.1%
wall clock vs sync, role switching ~+40% throughput over fully async without it).

`--trainer-nodes`: the trainer pool of the separate modes (default half the nodes, see the
model's docstring for why). `--sweep-split`: also run the separate modes at every split.
`--json`: the results and ratios as JSON, to OUT or (no OUT) to stdout instead of the table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from uni_agent_core.sim.async_rl import (
    PUBLISHED,
    AsyncRLConfig,
    format_table,
    reproduce_uni_agent,
    simulate_training,
)


def _config(args: argparse.Namespace) -> AsyncRLConfig:
    trainer = args.trainer_nodes if args.trainer_nodes is not None else max(1, args.nodes // 2)
    tasks = args.tasks if args.tasks is not None else 16 * args.nodes
    return replace(
        AsyncRLConfig(),
        nodes=args.nodes,
        trainer_nodes=trainer,
        tasks_per_step=tasks,
        steps=args.steps,
    )


def _sweep(config: AsyncRLConfig, seed: int) -> list[dict[str, float]]:
    rows = []
    for trainer in range(1, config.nodes):
        split = replace(config, trainer_nodes=trainer)
        plain = simulate_training("separate", split, seed)
        switching = simulate_training("separate_role_switching", split, seed)
        rows.append(
            {
                "trainer_nodes": trainer,
                "separate_wall_s": plain.wall_s,
                "separate_trainer_idle": plain.trainer_idle_frac,
                "separate_rollout_util": plain.rollout_util,
                "switching_wall_s": switching.wall_s,
                "switching_throughput_gain": switching.samples_per_s / plain.samples_per_s - 1,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trainer-nodes", type=int, default=None)
    parser.add_argument("--tasks", type=int, default=None, help="GRPO groups per step")
    parser.add_argument("--sweep-split", action="store_true")
    parser.add_argument("--json", nargs="?", const="-", default=None, metavar="OUT")
    args = parser.parse_args(argv)
    config = _config(args)
    started = time.perf_counter()
    comparison = reproduce_uni_agent(config, args.seed)
    sweep = _sweep(config, args.seed) if args.sweep_split else None
    elapsed = time.perf_counter() - started
    payload = {
        "config": {
            "nodes": config.nodes,
            "gpus_per_node": config.gpus_per_node,
            "trainer_nodes": config.trainer_nodes,
            "tasks_per_step": config.tasks_per_step,
            "group_size": config.group_size,
            "steps": config.steps,
            "max_staleness": config.max_staleness,
            "seed": args.seed,
        },
        **comparison.to_dict(),
        "split_sweep": sweep,
        "runtime_s": elapsed,
    }
    if args.json == "-":
        print(json.dumps(payload, indent=2))
        return
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2))
    print(
        f"{config.nodes} nodes x {config.gpus_per_node} H200, 8B policy; separate: "
        f"{config.trainer_nodes} trainer + {config.nodes - config.trainer_nodes} rollout nodes; "
        f"{config.steps} steps of {config.tasks_per_step} tasks x {config.group_size} SWE-like "
        f"episodes; staleness bound {config.max_staleness}; seed {args.seed}"
    )
    print()
    print(format_table(comparison))
    if sweep:
        print()
        print(
            "| trainer nodes | separate wall (h) | trainer idle | rollout util "
            "| switching wall (h) | switching throughput |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        for row in sweep:
            print(
                f"| {row['trainer_nodes']} | {row['separate_wall_s'] / 3600:.2f} "
                f"| {row['separate_trainer_idle'] * 100:.0f}% "
                f"| {row['separate_rollout_util'] * 100:.0f}% "
                f"| {row['switching_wall_s'] / 3600:.2f} "
                f"| {row['switching_throughput_gain'] * 100:+.1f}% |"
            )
    print()
    print(f"published: {PUBLISHED}; simulated in {elapsed:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
