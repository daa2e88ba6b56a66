"""Replica cost profiles for the cluster simulator, and the calibration that produced one of them.

A `ReplicaProfile` prices one scheduler iteration of a continuous-batching engine:

    t_iter = t_fixed_s
           + c_token_s      * (prefill tokens in the iteration)
           + c_decode_seq_s * (sequences decoding)
           + c_attn_pair_s  * (query-key pairs of the prefill chunks' attention)
           + c_kv_read_s    * (sum of the context lengths of the sequences decoding)

`t_fixed_s` is the per-iteration floor (weights read once, kernel launches, sampling, scheduler);
`c_token_s` and `c_decode_seq_s` the linear layers per prefilled token and per decoded sequence
(the same on a GPU, where both are one row of the same GEMMs); the attention of a prefill chunk
of `n` tokens after `p` already computed ones costs `n * p + n * (n + 1) / 2` query-key pairs;
decode attention reads every context token's K/V once per iteration (`c_kv_read_s` per token).
The profile also holds the engine's memory and batching limits.

Two profiles:

- `vllm_h200`: vLLM serving Llama-3.1-8B (bf16) on one NVIDIA H200, from published numbers; every
  constant below carries its source or its derivation. This is the bench's default (production).
- `hf_cpu_tiny`: agent-rl's `HFEngine` serving the locally built `tiny` policy on this machine's
  CPU, measured by `calibrate_hf_engine()`:

      python -m uni_agent_core.router.sim.profiles --calibrate
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class ReplicaProfile:
    """Costs and limits of one inference replica (see the module docstring for the model)."""

    name: str
    t_fixed_s: float
    c_token_s: float
    c_decode_seq_s: float
    c_attn_pair_s: float
    c_kv_read_s: float
    kv_capacity_tokens: int | None
    """Unified KV memory (vLLM): running requests' KV and the prefix cache share it; requests
    wait when it is full and cached prefixes are evicted (LRU) to admit them. None: running KV is
    unbounded and the prefix cache is separate (`cache_capacity_tokens`), as in `HFEngine`."""
    cache_capacity_tokens: int | None = None
    """Separate prefix-cache capacity (only when `kv_capacity_tokens` is None)."""
    max_batch_tokens: int | None = 8192
    """Token budget of one iteration (chunked prefill); None: admitted prompts are prefilled
    whole in the iteration that admits them (`HFEngine`)."""
    max_seqs: int = 1024
    """Running requests at most (vLLM `max_num_seqs`, `HFEngine` `max_batch_size`)."""
    block_size: int = 16
    """Prefix-cache granularity: only full blocks of this many tokens are cached and matched."""
    source: str = ""

    def iteration_time(
        self, prefill_tokens: int, prefill_pairs: float, decode_seqs: int, decode_context: int
    ) -> float:
        """Seconds one scheduler iteration takes."""
        return (
            self.t_fixed_s
            + self.c_token_s * prefill_tokens
            + self.c_decode_seq_s * decode_seqs
            + self.c_attn_pair_s * prefill_pairs
            + self.c_kv_read_s * decode_context
        )

    def with_capacity(
        self, kv_tokens: int | None, cache_tokens: int | None = None
    ) -> ReplicaProfile:
        """A copy with other memory limits (tests and what-if runs)."""
        return replace(self, kv_capacity_tokens=kv_tokens, cache_capacity_tokens=cache_tokens)


def prefill_pairs(start: int, tokens: int) -> float:
    """Query-key pairs of causal attention for `tokens` new tokens after `start` computed ones."""
    return tokens * start + tokens * (tokens + 1) / 2


# --------------------------------------------------------------------------------------------
# vllm_h200: vLLM + Llama-3.1-8B-Instruct (bf16) on one H200. Sources and derivations:
#
# Hardware (NVIDIA H200 datasheet, https://www.nvidia.com/en-us/data-center/h200/): 141 GB
# HBM3e, 4.8 TB/s, 989 TFLOPS dense BF16 (the datasheet's 1,979 is with sparsity).
#
# t_fixed_s = 6.2 ms. vLLM's nightly performance benchmark on H200,
#   https://buildkite.com/vllm/performance-benchmark/builds/9515 , `latency_llama8B_tp1`
#   (input 32, output 128, batch 8): mean 833.4 ms -> 833.4 / 128 = 6.51 ms per iteration at
#   batch 8. Less 8 x c_token (0.24 ms) and the KV reads (8 x ~100 tokens x c_kv, 0.03 ms):
#   6.51 - 0.27 = 6.2 ms. Cross-check: vLLM 0.21 on one H100, Llama-3.1-8B, concurrency 1,
#   TPOT p50 6.48 ms (https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/); reading
#   the 16.1 GB of weights alone takes 16.1 GB / 4.8 TB/s = 3.3 ms.
# c_token_s = 29.5 us. Linear layers: 2 x 8.03e9 parameters = 16.06 GFLOP per token. At an
#   assumed 55% of the 989 TFLOPS peak for the large GEMMs of 8192-token chunked-prefill
#   iterations: 16.06e9 / (0.55 * 989e12) = 29.5 us per token (~34K prefill tokens/s before
#   attention). ASSUMPTION: the 55% MFU; no published vLLM prefill-only figure for this GPU
#   was found. c_decode_seq_s is the same cost (a decoded sequence is one more row of the same
#   GEMMs), which puts batch-256 decode at ~13.8 ms per iteration plus its KV reads.
# c_attn_pair_s = 1.06 ns. Attention FLOPs per query-key pair: 32 layers x (2 x 4096 for QK^T +
#   2 x 4096 for PV) = 524,288. At 50% of peak (FlashAttention-3 reaches 75% of H100 peak in
#   BF16 forward, https://arxiv.org/abs/2407.08608 ; ASSUMPTION: 50% inside vLLM's chunks):
#   524,288 / (0.5 * 989e12) = 1.06 ns. A 32K-token prompt from scratch then takes
#   0.97 s (linear) + 0.57 s (attention) = 1.5 s.
# c_kv_read_s = 34.1 ns. KV per token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes =
#   128 KiB (Llama 3.1 blog, 8B: 0.125 GB per 1K tokens,
#   https://huggingface.co/blog/llama31#inference-memory-requirements ; vLLM's own log in
#   https://github.com/vllm-project/vllm/issues/10517 : 3.81 GiB of KV = 1952 blocks x 16 =
#   31,232 tokens = 128 KiB/token). Each decode iteration reads it once per context token; at
#   an assumed 80% of 4.8 TB/s: 131,072 / (0.8 * 4.8e12) = 34.1 ns per context token.
# kv_capacity_tokens = 825,536. vLLM's default gpu_memory_utilization 0.9 of 141e9 bytes =
#   126.9e9; less the weights (14.99 GiB) and the profiling peak and non-torch memory
#   (17.06 + 0.35 GiB in total, the Llama-3.1-8B log of vllm issue 10517) = 108.2e9 bytes =
#   825,550 tokens of 128 KiB, rounded down to whole 16-token blocks.
# max_batch_tokens = 8192, max_seqs = 1024: vLLM V1 `vllm serve` defaults on GPUs with >= 70 GiB
#   (vllm/engine/arg_utils.py, `get_batch_defaults`). block_size = 16: vLLM's default.
# --------------------------------------------------------------------------------------------
VLLM_H200 = ReplicaProfile(
    name="vllm_h200",
    t_fixed_s=6.2e-3,
    c_token_s=29.5e-6,
    c_decode_seq_s=29.5e-6,
    c_attn_pair_s=1.06e-9,
    c_kv_read_s=34.1e-9,
    kv_capacity_tokens=825_536,
    max_batch_tokens=8192,
    max_seqs=1024,
    block_size=16,
    source="published vLLM H200/H100 numbers and H200 datasheet (see profiles.py)",
)

# --------------------------------------------------------------------------------------------
# hf_cpu_tiny: HFEngine + the `tiny` policy (Qwen2-style, 4 layers, hidden 256), float32, on
# this machine's CPU (2 cores, shared). Measured on 2026-11-29 with
#     .venv/bin/python -m uni_agent_core.router.sim.profiles --calibrate --repeats 3
# which printed: prefill 256 / 512 / 1024 / 2048 / 4096 tokens = 17.6 / 35.1 / 67.6 / 150.8 /
# 355.6 ms; decode step at (batch, mean context) (1, 88) 3.07 ms, (4, 88) 3.67, (16, 88) 6.74,
# (32, 88) 8.31, (8, 1048) 13.47, (16, 536) 15.24 ms; least-squares fits: prefill 57.9 us per
# token + 13.8 ns per attention pair; decode 3.08 ms + 71.1 us per sequence + 1.23 us per context
# token (HFEngine's decode re-concatenates the whole batch KV every step, hence the large KV
# term). See `calibrate_hf_engine`. Memory: running
# KV is unbounded in HFEngine; its prefix cache holds `prefix_cache_tokens` = 65,536 tokens
# (the engine's default). max_seqs = 32: the engine's default `max_batch_size`. HFEngine
# prefills every admitted prompt whole (no token budget).
# --------------------------------------------------------------------------------------------
HF_CPU_TINY = ReplicaProfile(
    name="hf_cpu_tiny",
    t_fixed_s=3.08e-3,
    c_token_s=5.79e-5,
    c_decode_seq_s=7.11e-5,
    c_attn_pair_s=1.38e-8,
    c_kv_read_s=1.23e-6,
    kv_capacity_tokens=None,
    cache_capacity_tokens=65_536,
    max_batch_tokens=None,
    max_seqs=32,
    block_size=16,
    source="HFEngine on this CPU, measured by calibrate_hf_engine (see profiles.py)",
)

PROFILES: dict[str, ReplicaProfile] = {p.name: p for p in (VLLM_H200, HF_CPU_TINY)}


# -- calibration -------------------------------------------------------------------------------


def _fit(rows: list[list[float]], ys: list[float]) -> list[float]:
    """Least-squares coefficients of `ys ~ rows`, clipped at zero (costs are not negative)."""
    import numpy as np

    coef, *_ = np.linalg.lstsq(np.array(rows, dtype=float), np.array(ys, dtype=float), rcond=None)
    return [max(0.0, float(c)) for c in coef]


async def _timed_generate(engine: Any, prompts: list[list[int]], new_tokens: int) -> float:
    from uni_agent_core.inference.types import GenerateRequest

    start = time.perf_counter()
    await asyncio.gather(
        *(
            engine.generate(
                GenerateRequest(
                    prompt_ids=p, max_new_tokens=new_tokens, temperature=0.0, ignore_eos=True
                )
            )
            for p in prompts
        )
    )
    return time.perf_counter() - start


async def _calibrate(repeats: int) -> dict[str, Any]:
    from uni_agent_core.inference.hf_engine import HFEngine
    from uni_agent_core.models import load_policy

    model, tokenizer = load_policy("tiny", dtype="float32", device="cpu")
    vocab = int(model.config.vocab_size)
    engine = HFEngine(model, tokenizer, max_batch_size=32, prefix_cache_tokens=0)

    def prompt(n: int, salt: int) -> list[int]:
        return [5 + (salt * 7919 + i * 104_729) % (vocab - 5) for i in range(n)]

    await _timed_generate(engine, [prompt(64, 0)], 4)  # warm-up
    # Prefill: one request, one new token, no prefix cache; fit t = t0 + a*n + b*n(n+1)/2.
    prefill_rows, prefill_ys = [], []
    for n in (256, 512, 1024, 2048, 4096):
        t = statistics.median(
            [await _timed_generate(engine, [prompt(n, r)], 1) for r in range(repeats)]
        )
        prefill_rows.append([1.0, n, prefill_pairs(0, n)])
        prefill_ys.append(t)
    # Decode: per-step time from the difference of two generation lengths (prefills cancel).
    decode_rows, decode_ys = [], []
    short, long = 8, 40
    for batch, context in ((1, 64), (4, 64), (16, 64), (32, 64), (8, 1024), (16, 512)):
        prompts = [prompt(context, 100 + i) for i in range(batch)]
        steps = []
        for _ in range(repeats):
            t_short = await _timed_generate(engine, prompts, short)
            t_long = await _timed_generate(engine, prompts, long)
            steps.append((t_long - t_short) / (long - short))
        mean_context = context + (short + long) / 2
        decode_rows.append([1.0, batch, batch * mean_context])
        decode_ys.append(statistics.median(steps))
    await engine.close()
    t_fixed, c_token, c_kv = _fit(decode_rows, decode_ys)
    _, c_prefill_token, c_pair = _fit(prefill_rows, prefill_ys)
    return {
        "t_fixed_s": t_fixed,
        "c_token_s": c_prefill_token,
        "c_decode_seq_s": c_token,
        "c_attn_pair_s": c_pair,
        "c_kv_read_s": c_kv,
        "prefill_points": [(int(r[1]), y) for r, y in zip(prefill_rows, prefill_ys, strict=True)],
        "decode_points": [
            (int(r[1]), int(r[2] / r[1]), y) for r, y in zip(decode_rows, decode_ys, strict=True)
        ],
    }


def calibrate_hf_engine(repeats: int = 3) -> dict[str, Any]:
    """Measure `HFEngine` serving `tiny` on this CPU; returns the fitted profile constants.

    Prefill: single requests of 256..4096 prompt tokens with one new token and no prefix cache,
    fitted to `t0 + c_token * n + c_attn_pair * n(n+1)/2`. Decode: the per-step time at batch
    sizes 1..32 and contexts 64..1024, from two generation lengths (8 and 40 tokens, EOS ignored)
    so the prefills cancel, fitted to `t_fixed + c_decode_seq * batch + c_kv_read * sum(context)`.
    The prefill intercept (per-request engine overhead) is not used.
    """
    return asyncio.run(_calibrate(repeats))


def main() -> None:
    """`--calibrate`: measure HFEngine here and print the constants for `HF_CPU_TINY`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true", help="measure HFEngine + tiny here")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if not args.calibrate:
        for profile in PROFILES.values():
            print(profile)
        return
    result = calibrate_hf_engine(args.repeats)
    print("prefill (prompt tokens, seconds):")
    for n, t in result["prefill_points"]:
        print(f"  {n:>6} {t * 1000:9.2f} ms")
    print("decode step (batch, mean context, seconds):")
    for b, ctx, t in result["decode_points"]:
        print(f"  {b:>4} {ctx:>6} {t * 1000:9.2f} ms")
    for key in ("t_fixed_s", "c_token_s", "c_decode_seq_s", "c_attn_pair_s", "c_kv_read_s"):
        print(f"{key} = {result[key]:.3g}")


if __name__ == "__main__":
    main()
