"""Chains and chain selection: which token buffer a chat request continues.

A chain is one token-level trajectory of a session: `prompt_ids`, then response tokens with
their labels — loss mask (1 = sampled by the engine for this chain), logprobs and weight
versions — plus the prefix hashes of the message history it represents. For a request with
messages `m`:

1. chains that are reserved (a generation in flight), closed (capacity) or that have another
   tool list are skipped;
2. let `k` = the number of request messages that produced the chain's latest assistant turn;
   the chain is skipped if the request has `<= k` messages (a fresh sample from the same
   prompt: a sibling, not a continuation) or if `m[:k]` differs from the chain's history;
3. if the chain's whole history (with its latest assistant) is a prefix of `m`, it is an
   *exact* candidate of rank `k + 1`;
4. otherwise (the latest assistant was rewritten or dropped) and rollback is enabled, it is a
   *rollback* candidate at depth `k`, but only if the chain has response tokens before that
   assistant turn (a rewrite of the first assistant simply opens a new chain);
5. several rollback candidates tied at the deepest depth, deeper than the best exact rank, are
   ambiguous: a new chain opens; otherwise the winner is the max of (rank, exact over rollback,
   most recently updated, higher chain id). No candidate: a new chain.

`why_new_chain` names, for people reading an episode, why a request opened a chain.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from enum import StrEnum

from uni_agent_core.gateway.hashing import HASH_SIZE
from uni_agent_core.gateway.labels import ResponseLabels


def token_array(values: list[int] | None = None) -> array:
    """A compact int32 token buffer (4 bytes a token, invisible to the garbage collector)."""
    return array("i", values or ())


class Continuation(StrEnum):
    """How a request relates to the chain it was matched with."""

    APPEND = "append"
    ROLLBACK = "rollback"
    NEW = "new"


@dataclass(eq=False, slots=True)
class Chain:
    """One token-level trajectory of a session."""

    id: int
    tools_key: bytes
    digests: bytes
    """Prefix hashes of the history (request messages + latest assistant), 32 bytes each,
    concatenated (history + 1 of them); a flat blob costs no per-digest object."""
    # Token ids are int32 arrays; the response's mask, logprobs and versions are run-length
    # coded (`labels.py`): about 4 bytes a context token and 8 a sampled one.
    prompt_ids: array = field(default_factory=token_array)
    response_ids: array = field(default_factory=token_array)
    labels: ResponseLabels = field(default_factory=ResponseLabels)
    ended: bool = True
    """Whether the buffer ends with the end-of-turn token (False after a `length` stop)."""
    rollback_cut: int | None = None
    """Response index to cut back to when the latest assistant is rewritten (before the turn
    separator that precedes its generation prompt); None when that turn is the chain's first."""
    reserved: bool = False
    closed: bool = False
    finish_reason: str | None = None
    updated: int = 0
    turns: int = 0
    rollbacks: int = 0
    dropped_trainable_tokens: int = 0
    latest_call: int | None = None
    """Index (in the session's call list) of the call that produced the latest assistant."""
    opened_by: str = "first"
    """Why the gateway opened this chain (`why_new_chain`)."""
    rollback_marks: list[tuple[int, int]] = field(default_factory=list)
    """(response index where a rewrite's context starts, index of the superseded call), one per
    rollback, oldest first."""

    def digest(self, i: int) -> bytes:
        """The prefix hash of the first `i` history messages."""
        return self.digests[HASH_SIZE * i : HASH_SIZE * (i + 1)]

    @property
    def history_len(self) -> int:
        return len(self.digests) // HASH_SIZE - 1

    @property
    def k(self) -> int:
        """Messages before the latest assistant turn."""
        return self.history_len - 1

    @property
    def total_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


@dataclass(frozen=True)
class Selection:
    """The outcome of chain selection."""

    kind: Continuation
    chain: Chain | None = None
    depth: int = 0
    """Messages kept from the chain's history: `history_len` for append, `k` for rollback."""
    ambiguous: bool = False


def select_chain(
    chains: list[Chain],
    request_hashes: list[bytes],
    tools_key: bytes,
    *,
    enable_rollback: bool,
) -> Selection:
    """Pick the chain a request continues (see the module docstring for the rules).

    Args:
        chains: the session's chains.
        request_hashes: `prefix_hashes(request.messages)`.
        tools_key: `tools_key(request.tools)`.
        enable_rollback: whether rewrites of the latest assistant roll a chain back.
    """
    m = len(request_hashes) - 1
    exact: list[tuple[int, int, int, Chain]] = []
    rollback_depth = -1
    rollbacks: list[Chain] = []
    for chain in chains:
        if chain.reserved or chain.closed or chain.tools_key != tools_key:
            continue
        k = chain.k
        if m <= k or request_hashes[k] != chain.digest(k):
            continue
        history_len = k + 1
        if m > history_len and request_hashes[history_len] == chain.digest(history_len):
            exact.append((k + 1, chain.updated, chain.id, chain))
        elif enable_rollback and chain.rollback_cut is not None:
            if k > rollback_depth:
                rollback_depth, rollbacks = k, [chain]
            elif k == rollback_depth:
                rollbacks.append(chain)
    best_exact = max(exact, key=lambda c: c[:3], default=None)
    if len(rollbacks) > 1 and (best_exact is None or rollback_depth > best_exact[0]):
        return Selection(Continuation.NEW, ambiguous=True)
    if len(rollbacks) == 1:
        chain = rollbacks[0]
        # Same rank: the exact chain wins (it loses nothing); a deeper rollback beats it.
        if best_exact is None or rollback_depth > best_exact[0]:
            return Selection(Continuation.ROLLBACK, chain, depth=rollback_depth)
    if best_exact is not None:
        chain = best_exact[3]
        return Selection(Continuation.APPEND, chain, depth=chain.history_len)
    return Selection(Continuation.NEW)


class OpenedBy:
    """Why a chain was opened, as `why_new_chain` names it (the trace and the viewer show it)."""

    FIRST = "first"
    SIBLING = "sibling sample"
    CONCURRENT = "concurrent request (its chain was busy)"
    FULL = "split: the chain it continues is full (context capacity)"
    AMBIGUOUS = "split: ambiguous rollback"
    TOOLS = "split: other tool list (subagent)"
    SYSTEM = "split: other system prompt (subagent or side call)"
    DIVERGED = "split: history diverged (compaction or edit)"


def why_new_chain(
    chains: list[Chain], request_hashes: list[bytes], tools_key: bytes, selection: Selection
) -> str:
    """Why a request that `select_chain` answered with a new chain could continue none of
    `chains` (the session's chains before it): one of `OpenedBy`'s reasons."""
    if not chains:
        return OpenedBy.FIRST
    if selection.ambiguous:
        return OpenedBy.AMBIGUOUS
    same_tools = [chain for chain in chains if chain.tools_key == tools_key]
    if not same_tools:
        return OpenedBy.TOOLS
    m = len(request_hashes) - 1
    same_system = [chain for chain in same_tools if m >= 1 and request_hashes[1] == chain.digest(1)]
    if not same_system:
        return OpenedBy.SYSTEM
    continued = [
        chain
        for chain in same_system
        if m > chain.k and request_hashes[chain.k] == chain.digest(chain.k)
    ]
    if any(chain.reserved for chain in continued):
        return OpenedBy.CONCURRENT
    if any(chain.closed for chain in continued):
        return OpenedBy.FULL
    if any(m <= chain.k and request_hashes[m] == chain.digest(m) for chain in same_system):
        return OpenedBy.SIBLING
    return OpenedBy.DIVERGED
