"""What routing costs the process it runs in: CPU per request and residency-model memory.

    python bench/router_overhead.py [--replicas 8] [--sessions 64] [--turns 10]
                                    [--contexts 2000 30000 120000]

The router runs inside the gateway's process, so every request pays its policy's decision and
bookkeeping there. Each policy here routes the same agent workload through a `RoutingCore` with
no engines behind it: `--sessions` sessions whose context starts at the given size (int32
token arrays, as the gateway sends them) and grows by a 300-token output and a 300-token tool
result per turn, for `--turns` turns, over `--replicas` replicas of 1M KV tokens each. Printed
per policy and context size: CPU per request (route + complete), as a ratio to
`least_requests` in the same run (its decision reads no tree; the bookkeeping of the router's
residency trees is the same for every policy), and the bytes of every object the router's trees
(and `cache_aware`'s own ones) hold at the end, per token they hold.
"""

from __future__ import annotations

import argparse
import random
import time
from array import array

from _footprint import deep_size

from uni_agent_core.router.core import RoutingCore
from uni_agent_core.router.policies import RouteRequest, make_policy

KV_TOKENS = 1_000_000
"""KV capacity of each simulated replica (an H100/H200-class vLLM server)."""
TURN_TOKENS = 300
"""A turn's output, and the tool result appended after it."""


def _run(policy: str, context: int, args: argparse.Namespace) -> dict[str, float]:
    rng = random.Random(0)
    names = [f"replica-{i}" for i in range(args.replicas)]
    system = [rng.randrange(1000, 128_000) for _ in range(1500)]
    final = context + args.turns * 2 * TURN_TOKENS
    sessions = [
        array("i", system + [rng.randrange(1000, 128_000) for _ in range(final - 1500)])
        for _ in range(args.sessions)
    ]
    core = RoutingCore(make_policy(policy), names, kv_capacity_tokens=KV_TOKENS)
    cpu, requests = 0.0, 0
    for turn in range(args.turns):
        length = context + turn * 2 * TURN_TOKENS
        for index, tokens in enumerate(sessions):
            prompt = tokens[:length]  # the whole context so far, as the gateway sends it
            output = tokens[length : length + TURN_TOKENS]
            request = RouteRequest(f"{index}/{turn}", prompt, TURN_TOKENS, f"s{index}")
            started = time.process_time()
            dispatch = core.route(request)
            core.complete(dispatch, output)
            cpu += time.process_time() - started
            requests += 1
    trees = [r.tree for r in core.replicas]
    trees += list(getattr(core.policy, "_trees", {}).values())  # cache_aware's own trees
    resident = sum(tree.size for tree in trees)
    return {
        "cpu_ms": cpu / requests * 1e3,
        "bytes_per_token": deep_size(trees) / resident if resident else 0.0,
        "resident_tokens": float(resident),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--contexts", type=int, nargs="+", default=[2000, 30_000, 120_000])
    parser.add_argument(
        "--policies", nargs="+", default=["least_requests", "sticky", "cache_aware", "token_load"]
    )
    args = parser.parse_args()
    print(
        f"{args.sessions} sessions x {args.turns} turns over {args.replicas} replicas; "
        "CPU per request (route + complete), ratio to least_requests in this run"
    )
    header = f"{'context':>8}  {'policy':<15}{'CPU ms':>9}{'ratio':>8}{'tree B/token':>14}"
    print(header)
    print("-" * len(header))
    for context in args.contexts:
        base = None
        for policy in args.policies:
            row = _run(policy, context, args)
            base = base or row["cpu_ms"]
            per_token = f"{row['bytes_per_token']:.1f}" if row["resident_tokens"] else "-"
            print(
                f"{context:>8}  {policy:<15}{row['cpu_ms']:>9.3f}"
                f"{row['cpu_ms'] / base:>7.1f}x{per_token:>14}",
                flush=True,
            )


if __name__ == "__main__":
    main()
