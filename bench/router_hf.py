"""Real check of the router on this machine: two `HFEngine` replicas of `tiny`, many sessions.

    python bench/router_hf.py [--sessions 32] [--turns 6] [--policies round_robin token_load]

Each policy gets two fresh `HFEngine` replicas of the locally built `tiny` policy (separate
weights, a prefix cache of `--cache-tokens` each) behind a `Router`, and the same workload: 32
concurrent agent sessions, each `--turns` turns long. A turn's prompt is the whole context so
far (a system prompt shared by all sessions, the session's task, then every previous model
output and tool result), the model samples up to `--max-new-tokens`, and a tool result of
random length (seeded) is appended after a random pause (so turns of different sessions
interleave in a different order every turn, as tool calls of real agents do). Printed per
policy: prefill tokens computed (prompt tokens not served from a replica's prefix cache), cache
hit rate, wall time, and ratios to the first policy measured in the same run (this machine is
noisy).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from pathlib import Path

from uni_agent_core.config import PolicyConfig
from uni_agent_core.config.inference import HFEngineConfig
from uni_agent_core.inference.builder import build_engines
from uni_agent_core.inference.hf_engine import HFEngine
from uni_agent_core.inference.types import GenerateRequest
from uni_agent_core.router.policies import make_policy
from uni_agent_core.router.router import Router


def _replicas(n: int, cache_tokens: int, batch: int) -> list[HFEngine]:
    engine = HFEngineConfig(device="cpu", max_batch_size=batch, prefix_cache_tokens=cache_tokens)
    return build_engines(PolicyConfig(name="tiny", dtype="float32"), engine, replicas=n)


async def _session(router: Router, index: int, args: argparse.Namespace, vocab: int) -> dict:
    rng = random.Random(f"{args.seed}/{index}")
    shared = random.Random(args.seed)
    context = [shared.randrange(5, vocab) for _ in range(args.system_tokens)]
    context += [rng.randrange(5, vocab) for _ in range(args.task_tokens)]
    prompt_tokens = cached = 0
    for turn in range(args.turns):
        request = GenerateRequest(
            prompt_ids=context,
            max_new_tokens=args.max_new_tokens,
            ignore_eos=True,
            seed=rng.randrange(2**31),
            session_id=f"session-{index}",
            request_id=f"session-{index}/turn-{turn}",
        )
        output = await router.generate(request)
        prompt_tokens += output.prompt_tokens
        cached += output.cached_prefix_tokens
        context = [*context, *output.token_ids]
        await asyncio.sleep(rng.uniform(0.0, args.max_pause_s))
        context += [rng.randrange(5, vocab) for _ in range(rng.randint(16, args.tool_tokens))]
    return {"prompt_tokens": prompt_tokens, "cached_tokens": cached}


async def _run(policy: str, args: argparse.Namespace) -> dict:
    engines = _replicas(2, args.cache_tokens, args.batch)
    vocab = int(engines[0].model.config.vocab_size)
    # Warm-up outside the timing (first forward passes allocate), then empty prefix caches.
    for engine in engines:
        await engine.generate(GenerateRequest(prompt_ids=list(range(5, 69)), max_new_tokens=4))
        engine.prefix_cache.clear()
    router = Router(engines, make_policy(policy), kv_capacity_tokens=args.cache_tokens)
    started = time.perf_counter()
    results = await asyncio.gather(
        *(_session(router, i, args, vocab) for i in range(args.sessions))
    )
    wall = time.perf_counter() - started
    served = [view.sessions_placed for view in router.core.replicas]
    await router.close()
    prompt = sum(r["prompt_tokens"] for r in results)
    cached = sum(r["cached_tokens"] for r in results)
    return {
        "policy": policy,
        "wall_s": wall,
        "prompt_tokens": prompt,
        "prefill_tokens": prompt - cached,
        "cache_hit_rate": cached / prompt if prompt else 0.0,
        "sessions_placed_per_replica": served,
        "requests": args.sessions * args.turns,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--turns", type=int, default=6)
    parser.add_argument("--policies", nargs="+", default=["round_robin", "token_load"])
    parser.add_argument("--system-tokens", type=int, default=256)
    parser.add_argument("--task-tokens", type=int, default=256)
    parser.add_argument("--tool-tokens", type=int, default=128)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--max-pause-s", type=float, default=0.2)
    parser.add_argument("--cache-tokens", type=int, default=65536)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    rows = []
    for policy in args.policies:
        row = asyncio.run(_run(policy, args))
        rows.append(row)
        print(f"{policy}: {row['wall_s']:.1f}s", flush=True)
    base = rows[0]
    print()
    print(
        f"2 HFEngine replicas of tiny, {args.sessions} concurrent sessions x {args.turns} turns "
        f"(prefix cache {args.cache_tokens} tokens per replica); ratios vs {base['policy']}"
    )
    header = (
        f"{'policy':<15}{'prefill tok':>12}{'ratio':>8}{'hit rate':>10}"
        f"{'wall s':>9}{'ratio':>8}  sessions placed per replica"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        print(
            f"{row['policy']:<15}{row['prefill_tokens']:>12}"
            f"{row['prefill_tokens'] / base['prefill_tokens']:>8.2f}"
            f"{row['cache_hit_rate']:>10.1%}{row['wall_s']:>9.1f}"
            f"{row['wall_s'] / base['wall_s']:>8.2f}  {row['sessions_placed_per_replica']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
