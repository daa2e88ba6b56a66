"""PrefixCache: longest-prefix matches, subsumption, LRU eviction in tokens."""

from __future__ import annotations

import torch

from uni_agent_core.inference.prefix_cache import BLOCK, PrefixCache


def _kv(tokens: list[int]):
    # One layer whose "keys" encode the token ids, so a hit's content can be checked.
    data = torch.tensor(tokens, dtype=torch.float32)[None, None, :, None]
    return [(data, -data)]


def test_longest_prefix_is_found_and_capped() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    tokens = list(range(100))
    cache.insert(tokens, _kv(tokens))
    hit = cache.lookup(tokens[:70] + [999, 998], max_length=71)
    assert hit.length == 70
    assert hit.kv[0][0][0, 0, :, 0].tolist() == [float(t) for t in range(70)]
    capped = cache.lookup(tokens, max_length=99)
    assert capped.length == 99
    assert cache.lookup([5] + tokens, max_length=100).length == 0
    assert (cache.hits, cache.lookups) == (2, 3)


def test_match_extends_token_by_token_past_the_last_block() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    tokens = list(range(3 * BLOCK + 5))
    cache.insert(tokens, _kv(tokens))
    query = tokens[: 2 * BLOCK + 3] + [-1]
    assert cache.lookup(query, max_length=len(query) - 1).length == 2 * BLOCK + 3


def test_short_sequences_are_not_stored() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    cache.insert(list(range(BLOCK - 1)), _kv(list(range(BLOCK - 1))))
    assert len(cache) == 0


def test_an_extending_entry_subsumes_its_prefix() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    turn1 = list(range(40))
    turn2 = turn1 + list(range(100, 140))
    cache.insert(turn1, _kv(turn1))
    cache.insert(turn2, _kv(turn2))
    assert len(cache) == 1 and cache.stored_tokens == len(turn2)
    cache.insert(turn1, _kv(turn1))  # already covered by the longer entry
    assert len(cache) == 1
    assert cache.lookup(turn1 + [7], max_length=40).length == 40


def test_lru_eviction_keeps_capacity_in_tokens() -> None:
    cache = PrefixCache(capacity_tokens=100)
    a, b, c = ([i] * 40 for i in (1, 2, 3))
    cache.insert(a, _kv(a))
    cache.insert(b, _kv(b))
    cache.lookup(a + [0], max_length=40)  # a becomes most recently used
    cache.insert(c, _kv(c))
    assert cache.stored_tokens <= 100
    assert cache.lookup(b + [0], max_length=40).length == 0
    assert cache.lookup(a + [0], max_length=40).length == 40
    assert cache.lookup(c + [0], max_length=40).length == 40


def test_siblings_share_a_prefix_and_the_newest_is_used() -> None:
    cache = PrefixCache(capacity_tokens=10_000)
    shared = list(range(32))
    left, right = shared + [1] * 20, shared + [2] * 20
    cache.insert(left, _kv(left))
    cache.insert(right, _kv(right))
    assert len(cache) == 2
    assert cache.lookup(right + [0], max_length=52).length == 52
    assert cache.lookup(shared + [3], max_length=33).length == 32
    cache.clear()
    assert len(cache) == 0 and cache.stored_tokens == 0
    assert cache.lookup(right, max_length=10).length == 0
