"""Tests for `uni_agent_core.router.prefix_tree`: unit behaviour, a brute-force reference model
checked by hypothesis after every operation, and a speed sanity check."""

from __future__ import annotations

import random
import time
from array import array
from collections import Counter
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from uni_agent_core.router.prefix_tree import PrefixTree, as_int32


def resident(tree: PrefixTree) -> set[tuple[int, ...]]:
    """Every non-empty resident prefix of `tree`."""
    return {path[:i] for path in tree.paths() for i in range(1, len(path) + 1)}


# ------------------------------------------------------------------------------- unit tests


def test_empty_tree_matches_nothing() -> None:
    tree = PrefixTree()
    assert tree.match([1, 2, 3]) == 0
    assert tree.match([]) == 0
    assert tree.size == 0
    assert list(tree.paths()) == []


def test_insert_then_full_and_partial_matches() -> None:
    tree = PrefixTree()
    assert tree.insert([1, 2, 3, 4]) == 4
    assert tree.match([1, 2, 3, 4]) == 4
    assert tree.match((1, 2, 3, 4, 5, 6)) == 4
    assert tree.match([1, 2, 9]) == 2
    assert tree.match([2, 1]) == 0
    assert tree.match([1, 2], touch=False) == 2
    assert tree.size == 4


def test_divergence_splits_edges_and_counts_new_tokens() -> None:
    tree = PrefixTree()
    assert tree.insert([1, 2, 3, 4, 5]) == 5
    assert tree.insert([1, 2, 3, 7, 8]) == 2
    assert tree.insert([1, 2]) == 0
    assert tree.insert([1, 2, 3, 4, 5]) == 0
    assert tree.insert([9]) == 1
    assert tree.size == 8
    assert sorted(tree.paths()) == [(1, 2, 3, 4, 5), (1, 2, 3, 7, 8), (9,)]
    assert tree.match([1, 2, 3, 7, 0]) == 4
    assert tree.match([1, 2, 3, 4, 5, 6]) == 5


def test_insert_extends_an_existing_leaf() -> None:
    tree = PrefixTree()
    tree.insert([1, 2])
    assert tree.insert([1, 2, 3, 4]) == 2
    assert list(tree.paths()) == [(1, 2, 3, 4)]
    assert tree.size == 4


def test_evict_lru_leaf_first_and_match_touch_reorders() -> None:
    tree = PrefixTree()
    tree.insert([0, 1, 1])
    tree.insert([0, 2, 2])
    tree.insert([0, 3, 3])
    tree.match([0, 1, 1])  # now [0, 2, 2] is the least recently used
    tree.match([0, 3, 3], touch=False)  # no effect on the order
    assert tree.evict(2) == 2
    assert sorted(tree.paths()) == [(0, 1, 1), (0, 3, 3)]
    assert tree.evict(2) == 2
    assert sorted(tree.paths()) == [(0, 1, 1)]
    assert tree.evict(10) == 3
    assert tree.size == 0
    assert tree.evict(1) == 0


def test_partial_eviction_trims_the_tail_only() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3, 4, 5, 6])
    assert tree.evict(2) == 2
    assert list(tree.paths()) == [(1, 2, 3, 4)]
    assert tree.match([1, 2, 3, 4, 5, 6]) == 4
    assert tree.size == 4


def test_touching_mid_edge_keeps_the_tail_old() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3, 4])
    tree.insert([5, 6])
    tree.match([1, 2])  # [1, 2] is now newer than [5, 6]; [3, 4] is older than both
    assert tree.evict(3) == 3
    assert sorted(tree.paths()) == [(1, 2), (5,)]


def test_eviction_moves_to_the_parent_once_it_is_a_leaf() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3])
    tree.insert([1, 2, 4])
    tree.insert([7])
    assert tree.evict(2) == 2  # [1, 2, 3] first, then [1, 2, 4]'s last token
    assert sorted(tree.paths()) == [(1, 2), (7,)]
    assert tree.evict(2) == 2  # [1, 2] was touched at the same time as [1, 2, 4]: still older
    assert list(tree.paths()) == [(7,)]


def test_capacity_evicts_on_insert_but_spares_the_new_path() -> None:
    tree = PrefixTree(capacity_tokens=5)
    tree.insert([1, 2, 3])
    tree.insert([4, 5])
    assert tree.size == 5
    assert tree.insert([6, 7]) == 2
    assert tree.size == 5
    assert sorted(tree.paths()) == [(1,), (4, 5), (6, 7)]
    assert tree.insert(list(range(10, 20))) == 10  # longer than the capacity: stays whole
    assert list(tree.paths()) == [tuple(range(10, 20))]
    assert tree.size == 10


def test_set_capacity_evicts_down_at_once_sparing_pins_and_none_unbounds() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3])
    tree.insert([4, 5, 6])
    tree.pin([4, 5, 6])
    tree.insert([7, 8, 9])
    assert tree.set_capacity(4) == 5  # LRU leaves first: all of (1, 2, 3), then 7 of (7, 8, 9)
    assert sorted(tree.paths()) == [(4, 5, 6), (7,)]
    assert tree.set_capacity(2) == 1  # only the pinned path is left, above the capacity
    assert (tree.size, tree.capacity_tokens) == (3, 2)
    tree.unpin([4, 5, 6])
    tree.insert([10])
    assert tree.size == 2
    assert tree.set_capacity(None) == 0
    tree.insert(list(range(20, 40)))
    assert tree.size == 22
    with pytest.raises(ValueError, match="capacity_tokens"):
        tree.set_capacity(-1)


def test_pinned_paths_are_never_evicted() -> None:
    tree = PrefixTree(capacity_tokens=4)
    tree.insert([1, 2, 3])
    tree.pin([1, 2, 3])
    tree.insert([4, 5])
    assert tree.size == 5  # [4, 5] is the new path, [1, 2, 3] is pinned
    assert tree.evict(100) == 2
    assert list(tree.paths()) == [(1, 2, 3)]
    tree.pin([1, 2, 3])
    tree.unpin([1, 2, 3])
    assert tree.evict(1) == 0  # still pinned once
    tree.unpin([1, 2, 3])
    assert tree.evict(1) == 1
    assert list(tree.paths()) == [(1, 2)]


def test_pinned_prefix_protects_only_itself() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3, 4])
    tree.pin([1, 2])
    assert tree.evict(10) == 2
    assert list(tree.paths()) == [(1, 2)]


def test_insert_beyond_capacity_with_everything_pinned_stays_above_capacity() -> None:
    tree = PrefixTree(capacity_tokens=3)
    tree.insert([1, 2, 3])
    tree.pin([1, 2, 3])
    assert tree.insert([4, 5, 6]) == 3
    tree.pin([4, 5, 6])
    assert tree.insert([7, 8]) == 2
    assert tree.size == 8
    assert sorted(tree.paths()) == [(1, 2, 3), (4, 5, 6), (7, 8)]
    tree.unpin([1, 2, 3])
    assert tree.insert([]) == 0  # the next insert evicts back towards the capacity
    assert tree.size == 3
    assert list(tree.paths()) == [(4, 5, 6)]


def test_pin_and_unpin_errors() -> None:
    tree = PrefixTree()
    tree.insert([1, 2, 3])
    with pytest.raises(ValueError):
        tree.pin([1, 2, 4])  # not resident
    with pytest.raises(ValueError):
        tree.unpin([1, 2])  # resident but not pinned
    tree.pin([1])
    with pytest.raises(ValueError):
        tree.unpin([1, 2])  # [1, 2] itself is not pinned; nothing changes
    tree.unpin([1])
    with pytest.raises(ValueError):
        tree.unpin([1])
    with pytest.raises(ValueError):
        tree.unpin([5])
    tree.pin([])
    tree.unpin([])
    assert tree.evict(3) == 3


def test_clear_and_bad_capacity() -> None:
    tree = PrefixTree(capacity_tokens=10)
    tree.insert([1, 2, 3])
    tree.pin([1, 2, 3])
    tree.clear()
    assert tree.size == 0
    assert tree.match([1, 2, 3]) == 0
    with pytest.raises(ValueError):
        tree.unpin([1, 2, 3])
    assert tree.capacity_tokens == 10
    with pytest.raises(ValueError):
        PrefixTree(capacity_tokens=-1)


# ------------------------------------------------------------------ brute-force reference


class ReferenceTree:
    """Token-level model: a clock per resident prefix, evicting one token at a time."""

    def __init__(self, capacity_tokens: int | None) -> None:
        self.capacity = capacity_tokens
        self.clocks: dict[tuple[int, ...], int] = {}
        self.pins: Counter[tuple[int, ...]] = Counter()
        self.clock = 0

    @property
    def size(self) -> int:
        return len(self.clocks)

    def _longest(self, t: tuple[int, ...]) -> int:
        m = 0
        while m < len(t) and t[: m + 1] in self.clocks:
            m += 1
        return m

    def match(self, tokens: Sequence[int], touch: bool) -> int:
        t = tuple(tokens)
        m = self._longest(t)
        if touch:
            self.clock += 1
            for i in range(1, m + 1):
                self.clocks[t[:i]] = self.clock
        return m

    def insert(self, tokens: Sequence[int]) -> int:
        t = tuple(tokens)
        self.clock += 1
        prefixes = [t[:i] for i in range(1, len(t) + 1)]
        added = sum(p not in self.clocks for p in prefixes)
        for p in prefixes:
            self.clocks[p] = self.clock
        if self.capacity is not None and self.size > self.capacity:
            self.evict(self.size - self.capacity, protected=set(prefixes))
        return added

    def evict(self, n_tokens: int, protected: set[tuple[int, ...]] = frozenset()) -> int:
        freed = 0
        while freed < n_tokens:
            parents = {p[:-1] for p in self.clocks}
            leaves = [
                p
                for p in self.clocks
                if p not in parents and self.pins[p] == 0 and p not in protected
            ]
            if not leaves:
                break
            victim = min(leaves, key=lambda p: (self.clocks[p], -len(p)))
            del self.clocks[victim]
            freed += 1
        return freed

    def pin(self, tokens: Sequence[int]) -> None:
        t = tuple(tokens)
        if self._longest(t) < len(t):
            raise ValueError("not resident")
        for i in range(1, len(t) + 1):
            self.pins[t[:i]] += 1

    def unpin(self, tokens: Sequence[int]) -> None:
        t = tuple(tokens)
        prefixes = [t[:i] for i in range(1, len(t) + 1)]
        if any(p not in self.clocks or self.pins[p] <= 0 for p in prefixes):
            raise ValueError("not pinned")
        for p in prefixes:
            self.pins[p] -= 1


def _outcome(fn, *args):
    """The call's result, or the exception type it raised."""
    try:
        return fn(*args)
    except ValueError:
        return ValueError


def _run_against_reference(
    data: st.DataObject,
    alphabet: int | Sequence[int],
    max_len: int,
    n_ops: int,
    id_bytes: int = 4,
) -> None:
    """Random operations on a tree and the reference; `alphabet`: a count of ids from 0, or
    the ids themselves."""
    capacity = data.draw(st.one_of(st.none(), st.integers(0, 24)), label="capacity")
    tree, ref = PrefixTree(capacity, id_bytes=id_bytes), ReferenceTree(capacity)
    ids = st.integers(0, alphabet - 1) if isinstance(alphabet, int) else st.sampled_from(alphabet)
    seqs = st.lists(ids, max_size=max_len)
    inserted: list[list[int]] = []
    pinned: list[list[int]] = []
    for _ in range(n_ops):
        op = data.draw(st.sampled_from(["insert", "insert", "match", "evict", "pin", "unpin"]))
        if op == "insert":
            seq = data.draw(seqs)
            inserted.append(seq)
            assert tree.insert(seq) == ref.insert(seq)
        elif op == "match":
            seq = data.draw(seqs)
            touch = data.draw(st.booleans())
            assert tree.match(seq, touch=touch) == ref.match(seq, touch)
        elif op == "evict":
            n = data.draw(st.integers(0, 12))
            assert tree.evict(n) == ref.evict(n)
        elif op == "pin":
            if inserted and data.draw(st.booleans()):
                base = data.draw(st.sampled_from(inserted))
                seq = base[: data.draw(st.integers(0, len(base)))]
            else:
                seq = data.draw(seqs)
            result = _outcome(tree.pin, seq)
            assert result == _outcome(ref.pin, seq)
            if result is not ValueError:
                pinned.append(seq)
        else:
            if pinned and data.draw(st.booleans()):
                seq = pinned.pop(data.draw(st.integers(0, len(pinned) - 1)))
            else:
                seq = data.draw(seqs)
            assert _outcome(tree.unpin, seq) == _outcome(ref.unpin, seq)
        assert tree.size == ref.size
        assert resident(tree) == set(ref.clocks)


@settings(max_examples=250, deadline=None)
@given(data=st.data())
def test_matches_reference_small_alphabet(data: st.DataObject) -> None:
    _run_against_reference(data, alphabet=4, max_len=12, n_ops=40)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_matches_reference_binary_alphabet(data: st.DataObject) -> None:
    _run_against_reference(data, alphabet=2, max_len=10, n_ops=40)


HIGH_BYTE_IDS = {
    4: [1, 1 + 2**24, 1 + 2**8, -(2**31)],
    8: [1, 1 + 2**56, 1 + 2**32, -(2**63), 2**63 - 1],
}
"""Ids that agree in their low bytes: a common length counted in bytes instead of whole ids
would stop inside an id on them (small ids differ in their first byte and would not show it)."""


@pytest.mark.parametrize("id_bytes", [4, 8])
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_matches_reference_on_ids_that_share_low_bytes(data: st.DataObject, id_bytes: int) -> None:
    _run_against_reference(data, HIGH_BYTE_IDS[id_bytes], max_len=10, n_ops=30, id_bytes=id_bytes)


@pytest.mark.parametrize("id_bytes", [4, 8])
def test_divergence_is_found_at_every_position_of_a_long_edge(id_bytes: int) -> None:
    high = 1 << (8 * id_bytes - 8)  # changes only an id's most significant byte
    for length in (1, 2, 3, 31, 32, 33, 100, 257):
        edge = [i % 7 + 1 for i in range(length)]
        for cut in range(1, length):
            query = [*edge[:cut], edge[cut] ^ high, *edge[cut + 1 :]]
            tree = PrefixTree(id_bytes=id_bytes)
            tree.insert(edge)
            assert tree.match(query, touch=False) == cut, (length, cut)
            assert tree.insert(query) == length - cut  # the edge splits right after `cut` ids
            assert sorted(tree.paths()) == sorted([tuple(edge), tuple(query)])
            assert tree.evict(tree.size) == 2 * length - cut


@settings(max_examples=25, deadline=None)
@given(
    seqs=st.lists(st.lists(st.integers(0, 2), max_size=6), min_size=1, max_size=6),
    seed=st.integers(0, 2**32),
)
def test_heap_compaction_keeps_semantics(seqs: list[list[int]], seed: int) -> None:
    """Many touches of few nodes force stale-entry compaction; eviction must stay exact."""
    rng = random.Random(seed)
    tree, ref = PrefixTree(), ReferenceTree(None)
    for seq in seqs:
        tree.insert(seq)
        ref.insert(seq)
    for _ in range(3000):
        seq = rng.choice(seqs)
        assert tree.match(seq) == ref.match(seq, True)
    assert len(tree._heap) <= 1025  # stale entries were dropped
    for _ in range(ref.size + 1):
        assert tree.evict(1) == ref.evict(1)
        assert resident(tree) == set(ref.clocks)


# ---------------------------------------------------------------------------------- speed


def test_long_shared_prefixes_are_fast() -> None:
    rng = random.Random(0)
    stems = [[rng.randrange(50_000) for _ in range(1500)] for _ in range(10)]
    seqs = []
    for i in range(200):
        stem = stems[i % 10]
        cut = rng.randrange(1000, 1500)
        seqs.append(stem[:cut] + [rng.randrange(50_000) for _ in range(2000 - cut)])
    tree = PrefixTree(capacity_tokens=200_000)
    start = time.perf_counter()
    for seq in seqs:
        tree.insert(seq)
    for seq in seqs:
        assert tree.match(seq) == 2000
        assert tree.match(seq[:1700] + [-1], touch=False) == 1700
    tree.evict(tree.size // 2)
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, elapsed  # ~50 ms here; a quadratic tree would take minutes


def test_ids_are_stored_as_machine_ints_of_the_trees_width() -> None:
    tree = PrefixTree()
    prompt = array("i", [5, 6, 7, 8])
    assert as_int32(prompt) is prompt  # an int32 array is read as it is
    assert as_int32((5, 6)) == array("i", [5, 6])
    tree.insert(prompt)
    assert tree.match([5, 6, 7, 9]) == 3  # any sequence of ints matches the same path
    assert list(tree.paths()) == [(5, 6, 7, 8)]
    with pytest.raises(OverflowError):
        tree.insert([2**40])  # token ids are int32
    hashes = PrefixTree(id_bytes=8)  # e.g. chained 64-bit block hashes
    hashes.insert([2**40, -(2**62), 3])
    assert hashes.match((2**40, -(2**62), 4)) == 2
    assert list(hashes.paths()) == [(2**40, -(2**62), 3)]
    with pytest.raises(ValueError, match="id_bytes"):
        PrefixTree(id_bytes=2)
