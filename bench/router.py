"""Router policies on a simulated rollout cluster: 5 policies x 2 workloads x 3 loads, 8 replicas.

    python bench/router.py [--profile vllm_h200|hf_cpu_tiny] [--calibrate] [--loads 16 32 64]
                           [--workloads swe mixed] [--policies ...] [--replicas 8] [--seed 0]
                           [--jobs 2] [--quick] [--headroom] [--json OUT]

Each cell is one rollout batch simulated by `uni_agent_core.router.sim`: `load x replicas` agent
sessions (GRPO groups of 8) start together; every request is routed by the production
`RoutingCore` with the named policy and served by a continuous-batching replica model with a
real prefix cache and KV memory (see the sim package docstring for the model, and `profiles.py`
for the sourced cost constants: `vllm_h200` by default, `hf_cpu_tiny` measured here). Loads are
sessions per replica; at the highest load the live sessions' contexts exceed the cluster's KV
capacity (the "KV demand" line), the memory-bound regime of agentic RL rollouts.

Figures per cell: output tokens/s over the batch's makespan, the same for the first 90% of the
output tokens (leaving out the straggler tail: the makespan is largely set by the longest
sessions' tool pauses, which no routing changes), prompt tokens computed (prefill),
prefix-cache hit rate, p50/p99 request latency (arrival to last token, time held back by load
control included), makespan, load imbalance (max/mean replica busy time), tokens evicted from the
caches, preemptions, and how often load control held a request back (`token_load` only,
`router/load_control.py`); each also as a ratio to `least_requests` on the same workload and load
in this run. The same seed gives the same table. Targets checked at the highest load:
`token_load` throughput >= 1.3x `least_requests` and >= 1.1x `cache_aware`, cache hit rate >= 93%,
p99 latency no worse than `cache_aware`.

`--headroom` adds, per workload at the highest load, how much routing could still gain
(`router/sim/bounds.py`): the batch's makespan floor (its slowest session alone on an idle replica
with its history cached) and `token_load` and `cache_aware` simulated again with prefill costing
nothing (a perfect cache hit rate for their placement), next to the measured makespans. Every
policy serves the same output tokens, so these are throughput ratios too (four more simulations).

`--quick`: 2 replicas, 1/2/4 sessions per replica, sessions cut to 3 turns (a smoke test).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from uni_agent_core.router.policies import POLICIES
from uni_agent_core.router.sim import (
    PROFILES,
    WORKLOADS,
    ReplicaProfile,
    RunMetrics,
    Workload,
    calibrate_hf_engine,
    simulate,
)
from uni_agent_core.router.sim.bounds import makespan_floor, with_free_prefill

BASELINE = "least_requests"
HEADROOM_POLICIES = ("token_load", "cache_aware")
"""Policies `--headroom` simulates again with prefill costing nothing."""
COLUMNS = (
    # (header, metric, format)
    ("tok/s", "throughput_tok_s", "{:.0f}"),
    ("tok/s p90", "throughput_p90_tok_s", "{:.0f}"),
    ("prefill Mtok", "prefill_tokens", "{:.1f}"),
    ("hit", "cache_hit_rate", "{:.1%}"),
    ("p50 s", "latency_p50_s", "{:.2f}"),
    ("p99 s", "latency_p99_s", "{:.1f}"),
    ("makespan s", "makespan_s", "{:.0f}"),
    ("imbalance", "imbalance", "{:.2f}"),
    ("evicted Mtok", "evicted_tokens", "{:.1f}"),
    ("preempt", "preemptions", "{:.0f}"),
    ("held", "deferrals", "{:.0f}"),
)
_MEGA = {"prefill_tokens", "evicted_tokens"}


def _workload(name: str, max_turns: int | None) -> Workload:
    """The named workload, its sessions cut to `max_turns` turns if given (`--quick`)."""
    workload = WORKLOADS[name]
    return workload if max_turns is None else workload.with_max_turns(max_turns)


def _run(args: tuple[ReplicaProfile, str, str, int, int, int, int | None]) -> dict[str, Any]:
    profile, workload_name, policy, sessions, replicas, seed, max_turns = args
    workload = _workload(workload_name, max_turns)
    metrics: RunMetrics = simulate(
        profile, policy, workload, sessions, replicas=replicas, seed=seed
    )
    return metrics.as_dict()


def _ratio(value: float, base: float) -> float | None:
    if base == 0:
        return None if value else 1.0
    return value / base


def _cell(metric: str, fmt: str, row: dict[str, Any]) -> str:
    value = row[metric] / 1e6 if metric in _MEGA else row[metric]
    ratio = row["ratios"][metric]
    ratio_text = "  -  " if ratio is None else f"{ratio:.2f}x"
    return f"{fmt.format(value)} {ratio_text}"


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """Every figure of every row as a ratio to `least_requests` on its workload and load."""
    base = {(r["workload"], r["sessions"]): r for r in rows if r["policy"] == BASELINE}
    for row in rows:
        ref = base.get((row["workload"], row["sessions"]))
        row["ratios"] = {
            metric: (_ratio(row[metric], ref[metric]) if ref else None) for _, metric, _ in COLUMNS
        }


def check_targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's targets, per workload, at its highest load."""
    out = []
    for workload in dict.fromkeys(r["workload"] for r in rows):
        top = max(r["sessions"] for r in rows if r["workload"] == workload)
        cell = {r["policy"]: r for r in rows if r["workload"] == workload and r["sessions"] == top}
        tl, lr, ca = cell.get("token_load"), cell.get(BASELINE), cell.get("cache_aware")
        if tl is None:
            continue
        checks = []
        for other, bar in ((lr, 1.3), (ca, 1.1)):
            if other:
                ratio = tl["throughput_tok_s"] / other["throughput_tok_s"]
                p90 = tl["throughput_p90_tok_s"] / other["throughput_p90_tok_s"]
                name = f"throughput vs {other['policy']} >= {bar}x"
                checks.append((name, ratio, ratio >= bar, p90))
        hit = tl["cache_hit_rate"]
        checks.append(("cache hit rate >= 93%", hit, hit >= 0.93, None))
        if ca:
            ratio = tl["latency_p99_s"] / ca["latency_p99_s"]
            checks.append(("p99 latency vs cache_aware <= 1.0x", ratio, ratio <= 1.0, None))
        for name, value, ok, p90 in checks:
            entry = {"workload": workload, "sessions": top, "target": name, "value": value}
            entry["met"] = ok
            if p90 is not None:
                entry["p90_throughput_ratio"] = p90
            out.append(entry)
    return out


def headroom(
    rows: list[dict[str, Any]],
    free: list[dict[str, Any]],
    profile: ReplicaProfile,
    seed: int,
    max_turns: int | None,
) -> list[dict[str, Any]]:
    """Per workload at its highest load: the makespan floor, the measured makespans of the
    `HEADROOM_POLICIES` and theirs with prefill free (see `router/sim/bounds.py`)."""
    out = []
    for workload in dict.fromkeys(r["workload"] for r in free):
        top = max(r["sessions"] for r in free if r["workload"] == workload)
        floor = makespan_floor(profile, _workload(workload, max_turns), top, seed)
        entry: dict[str, Any] = {
            "workload": workload,
            "sessions": top,
            "floor_s": floor.makespan_s,
            "floor_session": floor.session_id,
            "floor_pauses_s": floor.pauses_s,
            "floor_serving_s": floor.serving_s,
        }
        for kind, source in (("measured", rows), ("free_prefill", free)):
            for r in source:
                if r["workload"] == workload and r["sessions"] == top:
                    entry[f"{r['policy']}_{kind}_s"] = r["makespan_s"]
        out.append(entry)
    return out


def print_headroom(entries: list[dict[str, Any]]) -> None:
    """The `--headroom` lines: makespans, and `token_load`'s best throughput vs `cache_aware`."""
    print(
        "headroom at the highest load (every policy serves the same output tokens, so "
        "throughput ratios are inverse makespan ratios):"
    )
    for e in entries:
        print(
            f"  {e['workload']} @ {e['sessions']} sessions: makespan floor {e['floor_s']:.0f} s "
            f"({e['floor_session']} alone: {e['floor_pauses_s']:.0f} s of tool pauses + "
            f"{e['floor_serving_s']:.0f} s served)"
        )
        for kind, label in (("measured", "measured"), ("free_prefill", "with prefill free")):
            spans = ", ".join(
                f"{p} {e[f'{p}_{kind}_s']:.0f} s" for p in HEADROOM_POLICIES if f"{p}_{kind}_s" in e
            )
            print(f"    makespan {label}: {spans}")
        ca = e.get("cache_aware_measured_s")
        tl, tl_free = e.get("token_load_measured_s"), e.get("token_load_free_prefill_s")
        if ca and tl and tl_free:
            print(
                f"    token_load throughput vs cache_aware: measured {ca / tl:.2f}x, "
                f"with prefill free {ca / tl_free:.2f}x, at the floor {ca / e['floor_s']:.2f}x"
            )


def print_table(rows: list[dict[str, Any]]) -> None:
    """One line per (workload, load, policy); figures with their ratio to least_requests."""
    headers = ["workload", "sessions", "policy", *(h for h, _, _ in COLUMNS)]
    lines = [
        [
            r["workload"],
            f"{r['sessions']} ({r['sessions'] // r['replicas']}/replica)",
            r["policy"],
            *(_cell(metric, fmt, r) for _, metric, fmt in COLUMNS),
        ]
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in [headers, *lines]) for i in range(len(headers))]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    previous = None
    for r, line in zip(rows, lines, strict=True):
        key = (r["workload"], r["sessions"])
        if previous is not None and key != previous:
            print("-+-".join("-" * w for w in widths))
        previous = key
        print(" | ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=True)))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run the grid, print the table and the targets; returns what `--json` writes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="vllm_h200", choices=sorted(PROFILES))
    parser.add_argument(
        "--calibrate", action="store_true", help="re-measure hf_cpu_tiny with HFEngine first"
    )
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument(
        "--loads", nargs="+", type=int, default=[16, 32, 64], help="sessions per replica"
    )
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="simulations run in parallel")
    parser.add_argument("--quick", action="store_true", help="tiny smoke-test grid")
    parser.add_argument(
        "--headroom", action="store_true", help="also bound what routing could still gain"
    )
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    max_turns = None
    if args.quick:
        args.replicas, args.loads, args.jobs, max_turns = 2, [1, 2, 4], 1, 3
    profile = PROFILES[args.profile]
    if args.calibrate:
        measured = calibrate_hf_engine()
        fields = ("t_fixed_s", "c_token_s", "c_decode_seq_s", "c_attn_pair_s", "c_kv_read_s")
        calibrated = replace(PROFILES["hf_cpu_tiny"], **{k: measured[k] for k in fields})
        print("calibrated hf_cpu_tiny: " + ", ".join(f"{k}={measured[k]:.3g}" for k in fields))
        if args.profile == "hf_cpu_tiny":
            profile = calibrated
    policies = [BASELINE, *(p for p in args.policies if p != BASELINE)]
    tasks = [
        (profile, workload, policy, load * args.replicas, args.replicas, args.seed, max_turns)
        for workload in args.workloads
        for load in sorted(args.loads)
        for policy in policies
    ]
    grid = len(tasks)
    if args.headroom:
        free_profile = with_free_prefill(profile)
        top = max(args.loads) * args.replicas
        tasks += [
            (free_profile, workload, policy, top, args.replicas, args.seed, max_turns)
            for workload in args.workloads
            for policy in HEADROOM_POLICIES
            if policy in policies
        ]
    started = time.perf_counter()
    # The largest batches first, so parallel workers finish together; results keep task order.
    order = sorted(range(len(tasks)), key=lambda i: -tasks[i][3])
    results: list[dict[str, Any] | None] = [None] * len(tasks)
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for i, result in zip(order, pool.map(_run, [tasks[i] for i in order]), strict=True):
                results[i] = result
    else:
        for i in order:
            results[i] = _run(tasks[i])
    done = [r for r in results if r is not None]
    rows, free = done[:grid], done[grid:]
    entries = headroom(rows, free, profile, args.seed, max_turns) if args.headroom else []
    wall = time.perf_counter() - started
    add_ratios(rows)
    targets = check_targets(rows)

    capacity = profile.kv_capacity_tokens or profile.cache_capacity_tokens or 0
    print(
        f"\nprofile {profile.name} ({profile.source}); {args.replicas} replicas x "
        f"{capacity:,} KV tokens; seed {args.seed}; ratios vs {BASELINE} in this run"
    )
    for workload in args.workloads:
        demand = ", ".join(
            f"{r['sessions']} sessions {r['kv_demand']:.2f}"
            for r in rows
            if r["workload"] == workload and r["policy"] == BASELINE
        )
        print(f"KV demand (peak live context / cluster KV), {workload}: {demand}")
    print()
    print_table(rows)
    print()
    for t in targets:
        value = f"{t['value']:.1%}" if "hit rate" in t["target"] else f"{t['value']:.2f}x"
        if "p90_throughput_ratio" in t:
            value += f" (first 90% of tokens: {t['p90_throughput_ratio']:.2f}x)"
        status = "met" if t["met"] else "MISSED"
        print(
            f"target {t['workload']} @ {t['sessions']} sessions: token_load {t['target']}: "
            f"{value} -> {status}"
        )
    if entries:
        print()
        print_headroom(entries)
    print(f"\n{len(done)} simulations in {wall:.0f} s ({args.jobs} parallel)")
    result = {
        "profile": profile.__dict__,
        "replicas": args.replicas,
        "loads": sorted(args.loads),
        "seed": args.seed,
        "baseline": BASELINE,
        "runs": rows,
        "targets": targets,
        "headroom": entries,
        "wall_s": wall,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
