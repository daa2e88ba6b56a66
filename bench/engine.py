"""Benchmark HFEngine against plain `transformers` generate, and its prefix cache.

    python bench/engine.py [--models tiny smollm2-135m] [--repeats 3] [--new-tokens 32]

For each model, all figures are measured in the same run (this machine is noisy; compare the
ratios, not absolute times), each the median of `--repeats` repetitions:

1. batch 1: tokens/s of `model.generate` vs `HFEngine` for one request;
2. 16 requests: tokens/s of 16 sequential `model.generate` calls (the baseline) vs 16 concurrent
   requests to one `HFEngine` (continuous batching) — target >= 3x;
3. a 20-turn session whose context grows every turn (each turn re-sends the whole history plus a
   new tool result, like an agent harness): the latency of turn 20 with the prefix cache vs
   without it — target >= 2x;
4. precision: 16 concurrent requests to an `HFEngine` with bf16 weights (`policy.dtype:
   bfloat16`) vs the same engine in float32, repeats alternating — target >= 1.7x.

Every request samples exactly `--new-tokens` tokens (EOS ignored) so all rows do equal work.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import time

import torch

from uni_agent_core.host_cpu import describe_cpu
from uni_agent_core.inference import GenerateRequest, HFEngine
from uni_agent_core.inference.compute_thread import compute_executor
from uni_agent_core.models import load_policy
from uni_agent_core.models.precision_choice import choose_dtype

CONCURRENT = 16
TURNS = 20
TOOL_RESULT_TOKENS = 120
TURN_NEW_TOKENS = 24


def _prompt(tokenizer, text: str) -> list[int]:
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
    )
    return tokenizer(rendered, add_special_tokens=False)["input_ids"]


def _hf_generate(model, prompt: list[int], new_tokens: int) -> int:
    # Same OS thread as the engine's compute: the comparison is free of OpenMP team contention.
    return compute_executor().submit(_hf_generate_here, model, prompt, new_tokens).result()


def _hf_generate_here(model, prompt: list[int], new_tokens: int) -> int:
    ids = torch.tensor([prompt])
    with torch.inference_mode():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
        )
    return out.shape[1] - ids.shape[1]


async def _engine_run(engine: HFEngine, prompts: list[list[int]], new_tokens: int) -> int:
    outs = await asyncio.gather(
        *(
            engine.generate(
                GenerateRequest(
                    prompt_ids=p, max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True
                )
            )
            for p in prompts
        )
    )
    return sum(len(o.token_ids) for o in outs)


def _timed(fn) -> tuple[float, int]:
    start = time.perf_counter()
    tokens = fn()
    return time.perf_counter() - start, tokens


def _median_rate(samples: list[tuple[float, int]]) -> float:
    return statistics.median(tokens / seconds for seconds, tokens in samples)


async def _session_turn20_latency(engine: HFEngine, tokenizer, first: list[int]) -> float:
    """Run a 20-turn session; return the latency of the last turn."""
    filler = tokenizer(" lorem ipsum dolor", add_special_tokens=False)["input_ids"]
    tool_turn_prefix = tokenizer("\n<|im_start|>user\n<tool_response>\n", add_special_tokens=False)[
        "input_ids"
    ]
    tool_turn_suffix = tokenizer(
        "\n</tool_response><|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False
    )["input_ids"]
    context = list(first)
    latency = 0.0
    for turn in range(TURNS):
        start = time.perf_counter()
        out = await engine.generate(
            GenerateRequest(
                prompt_ids=context,
                max_new_tokens=TURN_NEW_TOKENS,
                temperature=0.0,
                ignore_eos=True,
                session_id="bench",
            )
        )
        latency = time.perf_counter() - start
        tool_result = (filler * TOOL_RESULT_TOKENS)[: TOOL_RESULT_TOKENS - turn % 3]
        context = context + out.token_ids + tool_turn_prefix + tool_result + tool_turn_suffix
    return latency


async def _precision_rates(
    model, tokenizer, prompts: list[list[int]], new_tokens: int, repeats: int
) -> tuple[float, float]:
    """Median tokens/s of 16 concurrent requests in float32 and in bf16, repeats alternating."""
    engines = {
        "float32": HFEngine(model, tokenizer, max_batch_size=CONCURRENT, prefix_cache_tokens=0),
        "bfloat16": HFEngine(
            copy.deepcopy(model).to(torch.bfloat16),
            tokenizer,
            max_batch_size=CONCURRENT,
            prefix_cache_tokens=0,
        ),
    }
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in engines}
    for engine in engines.values():
        await _engine_run(engine, prompts[:2], 4)  # warm-up
    for _ in range(repeats):
        for name, engine in engines.items():
            start = time.perf_counter()
            n = await _engine_run(engine, prompts, new_tokens)
            samples[name].append((time.perf_counter() - start, n))
    for engine in engines.values():
        await engine.close()
    return _median_rate(samples["float32"]), _median_rate(samples["bfloat16"])


def bench_model(name: str, repeats: int, new_tokens: int) -> list[tuple[str, str, str, str]]:
    model, tokenizer = load_policy(name)
    prompts = [
        _prompt(tokenizer, f"Request {i}: explain how to fix a failing unit test, step {i}.")
        for i in range(CONCURRENT)
    ]
    _hf_generate(model, prompts[0], 4)  # warm-up

    hf_single = [
        _timed(lambda: _hf_generate(model, prompts[0], new_tokens)) for _ in range(repeats)
    ]
    hf_sequential = [
        _timed(lambda: sum(_hf_generate(model, p, new_tokens) for p in prompts))
        for _ in range(repeats)
    ]

    async def engine_figures() -> tuple[list, list, float, float]:
        engine = HFEngine(model, tokenizer, max_batch_size=CONCURRENT, prefix_cache_tokens=0)
        await _engine_run(engine, prompts[:1], 4)  # warm-up
        single, batched = [], []
        for _ in range(repeats):
            start = time.perf_counter()
            n = await _engine_run(engine, prompts[:1], new_tokens)
            single.append((time.perf_counter() - start, n))
            start = time.perf_counter()
            n = await _engine_run(engine, prompts, new_tokens)
            batched.append((time.perf_counter() - start, n))
        no_cache = [
            await _session_turn20_latency(engine, tokenizer, prompts[0]) for _ in range(repeats)
        ]
        await engine.close()
        cached_engine = HFEngine(model, tokenizer, prefix_cache_tokens=1 << 20)
        cached = [
            await _session_turn20_latency(cached_engine, tokenizer, prompts[i])
            for i in range(repeats)
        ]
        await cached_engine.close()
        return single, batched, statistics.median(no_cache), statistics.median(cached)

    eng_single, eng_batched, turn20_cold, turn20_cached = asyncio.run(engine_figures())
    fp32_16, bf16_16 = asyncio.run(_precision_rates(model, tokenizer, prompts, new_tokens, repeats))
    rate = {
        "hf1": _median_rate(hf_single),
        "eng1": _median_rate(eng_single),
        "hf16": _median_rate(hf_sequential),
        "eng16": _median_rate(eng_batched),
    }
    return [
        (name, "batch 1: transformers generate", f"{rate['hf1']:.1f} tok/s", "1.00x"),
        (
            name,
            "batch 1: HFEngine",
            f"{rate['eng1']:.1f} tok/s",
            f"{rate['eng1'] / rate['hf1']:.2f}x",
        ),
        (name, "16 requests: sequential generate", f"{rate['hf16']:.1f} tok/s", "1.00x"),
        (
            name,
            "16 requests: HFEngine concurrent",
            f"{rate['eng16']:.1f} tok/s",
            f"{rate['eng16'] / rate['hf16']:.2f}x (target >= 3x)",
        ),
        (name, "turn 20 latency: no prefix cache", f"{turn20_cold * 1000:.0f} ms", "1.00x"),
        (
            name,
            "turn 20 latency: prefix cache",
            f"{turn20_cached * 1000:.0f} ms",
            f"{turn20_cold / turn20_cached:.2f}x (target >= 2x)",
        ),
        (name, "16 requests: HFEngine float32", f"{fp32_16:.1f} tok/s", "1.00x"),
        (
            name,
            "16 requests: HFEngine bf16",
            f"{bf16_16:.1f} tok/s",
            f"{bf16_16 / fp32_16:.2f}x (target >= 1.7x)",
        ),
    ]


def print_table(rows: list[tuple[str, str, str, str]]) -> None:
    headers = ("model", "measurement", "median", "ratio vs baseline")
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(4)]
    line = " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2-135m"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=32)
    args = parser.parse_args()
    rows = []
    print(f"CPU: {describe_cpu()}; torch {torch.__version__}", flush=True)
    for name in args.models:
        # what `policy.dtype: auto` runs this policy in here, and why (models/precision_choice.py)
        print(choose_dtype(name, echo=print).summary(), flush=True)
        print(f"benchmarking {name} ({args.repeats} repeats) ...", flush=True)
        started = time.perf_counter()
        rows.extend(bench_model(name, args.repeats, args.new_tokens))
        print(f"  done in {time.perf_counter() - started:.0f} s", flush=True)
    print(
        f"\ntorch threads: {torch.get_num_threads()}; {TURNS}-turn session: "
        f"{TOOL_RESULT_TOKENS}-token tool results, {TURN_NEW_TOKENS} new tokens per turn\n"
    )
    print_table(rows)


if __name__ == "__main__":
    main()
