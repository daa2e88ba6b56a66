"""KV memory of a vLLM or SGLang server, read from its Prometheus `/metrics` text.

The router needs to know how much KV memory a remote replica has in all (it sizes its model of
what the replica caches by it) and how much is left (its `token_load` policy releases session
affinity under memory pressure). Neither server puts that in an API response; both export it as
metrics:

- vLLM: `vllm:kv_cache_usage_perc` (older releases: `vllm:gpu_cache_usage_perc`), a fraction in
  [0, 1], and `vllm:cache_config_info`, whose labels carry `num_gpu_blocks` and `block_size`;
- SGLang: `sglang:token_usage` (a fraction) and `sglang:max_total_num_tokens`.

A server running several data-parallel engines exports one sample of each per engine.

Free KV tokens = (1 - usage) x capacity in tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        labels = dict(_LABEL.findall(match["labels"] or ""))
        samples.append((match["name"], labels, value))
    return samples


def _mean(samples: list[tuple[str, dict[str, str], float]], *names: str) -> float | None:
    """The mean of the first of `names` exported (one sample per engine: average the usage)."""
    for name in names:
        values = [value for sample, _, value in samples if sample == name]
        if values:
            return sum(values) / len(values)
    return None


def _vllm_capacity(samples: list[tuple[str, dict[str, str], float]]) -> int | None:
    """Blocks x block size of `vllm:cache_config_info`, summed over its engines (one sample per
    data-parallel engine, told apart by their `engine` label)."""
    info = [labels for name, labels, _ in samples if name == "vllm:cache_config_info"]
    try:
        sizes = [int(labels["num_gpu_blocks"]) * int(labels["block_size"]) for labels in info]
    except (KeyError, ValueError):
        return None
    return sum(sizes) if sizes else None


@dataclass(frozen=True)
class KvMemory:
    """A server's KV cache, in tokens."""

    capacity_tokens: int
    free_tokens: int


def kv_memory(metrics_text: str, api: str) -> KvMemory | None:
    """The KV capacity and free tokens the server reports, or None when its metrics do not say.

    A server running several data-parallel engines exports one sample per engine: capacities
    add up, usage shares are averaged.
    """
    samples = _samples(metrics_text)
    if api == "vllm":
        usage = _mean(samples, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        capacity = _vllm_capacity(samples)
    else:
        usage = _mean(samples, "sglang:token_usage")
        totals = [value for name, _, value in samples if name == "sglang:max_total_num_tokens"]
        capacity = int(sum(totals)) if totals else None
    if usage is None or capacity is None:
        return None
    free = max(0, round((1.0 - min(max(usage, 0.0), 1.0)) * capacity))
    return KvMemory(capacity_tokens=capacity, free_tokens=free)
