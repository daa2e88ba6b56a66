"""Decode-step attention of a padded batch: transformers' `sdpa` against `agent-rl-gqa`.

    python bench/attention.py [--rows 48] [--keys 1400] [--repeats 20]

One layer of SmolLM2-135M's attention (9 query heads over 3 key/value heads, head size 64, bf16)
for one new token per row over a left-padded KV cache, as `HFEngine` decodes: `sdpa` repeats the
keys and values to every query head when there is a mask (`repeat_kv`), `agent-rl-gqa`
(`uni_agent_core/models/attention.py`) folds each group's query heads into the query axis.
Printed: milliseconds per layer for each, their ratio, and the largest difference of the two
outputs against a float64 reference (both are the same kernel, so they round alike).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from uni_agent_core.models.attention import grouped_query_attention

HEADS, KV_HEADS, HEAD_DIM = 9, 3, 64


def _sdpa_repeated(query, key, value, mask):
    groups = query.shape[1] // key.shape[1]
    key = key.repeat_interleave(groups, dim=1)
    value = value.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=mask).transpose(1, 2)


def _ms_per_call(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    started = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - started) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--keys", type=int, default=1400)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    rows, keys = args.rows, args.keys
    query = torch.randn(rows, HEADS, 1, HEAD_DIM, dtype=torch.bfloat16)
    # the cache is a view of a larger buffer, as KVBatch hands it to the model
    key = torch.randn(rows, KV_HEADS, keys + 256, HEAD_DIM, dtype=torch.bfloat16)[:, :, :keys]
    value = torch.randn(rows, KV_HEADS, keys + 256, HEAD_DIM, dtype=torch.bfloat16)[:, :, :keys]
    mask = torch.ones(rows, 1, 1, keys, dtype=torch.bool)
    for row in range(rows):  # rows of different lengths: left padding
        mask[row, :, :, : (row * 7) % (keys // 4)] = False
    module = torch.nn.Module()
    exact = _sdpa_repeated(query.double(), key.double(), value.double(), mask)
    paths = {
        "sdpa (repeat_kv)": lambda: _sdpa_repeated(query, key, value, mask),
        "agent-rl-gqa": lambda: grouped_query_attention(module, query, key, value, mask)[0],
    }
    print(f"decode attention, {rows} rows x {keys} keys, bf16, one layer")
    print(f"{'path':20s} {'ms/layer':>9s} {'vs sdpa':>8s} {'max |err| vs f64':>17s}")
    base = None
    for name, fn in paths.items():
        ms = _ms_per_call(fn, args.repeats)
        base = base or ms
        error = float((fn().double() - exact).abs().max())
        print(f"{name:20s} {ms:9.2f} {base / ms:7.2f}x {error:17.2e}")


if __name__ == "__main__":
    main()
