"""Agent-session workloads for the cluster simulator: what every session sends, turn by turn.

A rollout batch is `n` sessions started together (RL: tasks x a GRPO group). Sessions of one
group share the task (same prompt, different samples); every session of a workload shares its
system prompt. A session is a sequence of turns; each turn's prompt is the whole context so far:

    system prompt | task | output 1 | tool result 1 | output 2 | tool result 2 | ...

After a turn's output the session waits for its tool (a long-tailed pause: most commands return
in seconds, builds and test suites take minutes), appends the tool result and sends the next
turn. It ends after its sampled number of turns, or when the next turn would not fit its context
cap (32K for SWE-style agents, 128K for long-context agents).

Token ids are drawn from per-session RNGs (system prompt: per workload; task: per group), so two
sessions share exactly the system prompt, plus the task within a group, and diverge after it:
what a prefix cache can reuse is the real structure, never an accident. Every random draw of a
session comes from its own RNG in a fixed order, so the workload is identical whatever the
routing and timing (each policy sees the same sessions, outputs, tool results and pauses).

Modelling assumptions (all lengths in tokens, clipped lognormals `median * exp(sigma * N(0,1))`):

- `swe` (SWE-bench-like coding agents, all sessions long): system prompt 2,000 (agent
  instructions and tool schemas); task median 1,200 (issue text, repository hints); 10-100
  turns (median 35); output median 180 (reasoning + one tool call, 50-2,000); tool result median
  350 (command output, file views, up to 8,000); pause median 2 s (p90 ~12 s, p99 ~50 s, up to
  10 min); context cap 32,768; max_new_tokens 2,048.
- `mixed`: 70% of the groups short chat-like sessions (1-3 turns, prompt median 400, output
  median 300, follow-up median 150, user pause median 5 s, cap 32K) and 30% long-context agents
  (10-100 turns, median 30; task median 2,000; output median 250; tool results median 1,500,
  mean ~3,100, up to 20,000 (whole files, logs, test output); pause as in `swe`; context cap
  131,072, reached after ~35 turns; max_new_tokens 4,096). System prompt 1,500.
- A GRPO group of 8 sessions per task in both.
"""

from __future__ import annotations

import math
import operator
import random
from dataclasses import dataclass, field, replace

import numpy as np

VOCAB = 128_256
"""Token ids are drawn from a Llama-3-sized vocabulary."""

_POOL = tuple(range(VOCAB))
"""Drawing ids from one pool makes token tuples share the int objects (memory: pointers only)."""


def _draw(gen: np.random.Generator, k: int) -> tuple[int, ...]:
    """`k` token ids (at least one), uniform over the vocabulary, as pooled ints."""
    ids = gen.integers(0, VOCAB, size=max(1, k)).tolist()
    picked = operator.itemgetter(*ids)(_POOL)
    return picked if isinstance(picked, tuple) else (picked,)


@dataclass(frozen=True)
class LogNormal:
    """A clipped lognormal: `median * exp(sigma * N(0, 1))`, kept within [low, high]."""

    median: float
    sigma: float
    low: float
    high: float

    def sample(self, rng: random.Random) -> float:
        """One draw."""
        return min(self.high, max(self.low, self.median * math.exp(self.sigma * rng.gauss())))

    def sample_int(self, rng: random.Random) -> int:
        """One draw, rounded to an integer."""
        return round(self.sample(rng))


@dataclass(frozen=True)
class SessionKind:
    """One kind of session of a workload and its share of the groups."""

    name: str
    share: float
    turns: LogNormal
    task_tokens: LogNormal
    output_tokens: LogNormal
    tool_tokens: LogNormal
    pause_s: LogNormal
    context_cap: int
    max_new_tokens: int


@dataclass(frozen=True)
class Workload:
    """A named mix of session kinds sharing a system prompt, in GRPO groups."""

    name: str
    system_tokens: int
    group_size: int
    kinds: tuple[SessionKind, ...]

    def with_max_turns(self, turns: int) -> Workload:
        """The same workload with every session cut to at most `turns` turns (quick runs)."""
        kinds = tuple(
            replace(k, turns=replace(k.turns, high=min(k.turns.high, turns))) for k in self.kinds
        )
        return replace(self, kinds=kinds)

    def sessions(self, n: int, seed: int, block_size: int) -> list[Session]:
        """The `n` sessions of a rollout batch (`n / group_size` tasks), deterministic in `seed`."""
        system_rng = random.Random(f"{seed}/{self.name}/system")
        system = _draw(np.random.default_rng(system_rng.getrandbits(64)), self.system_tokens)
        shares = [k.share for k in self.kinds]
        out: list[Session] = []
        for group in range((n + self.group_size - 1) // self.group_size):
            group_rng = random.Random(f"{seed}/{self.name}/group/{group}")
            kind = group_rng.choices(self.kinds, weights=shares)[0]
            task_gen = np.random.default_rng(group_rng.getrandbits(64))
            task = _draw(task_gen, kind.task_tokens.sample_int(group_rng))
            for member in range(self.group_size):
                index = group * self.group_size + member
                if index >= n:
                    break
                rng = random.Random(f"{seed}/{self.name}/session/{index}")
                out.append(Session(index, group, kind, system + task, rng, block_size))
        return out


@dataclass(eq=False)
class Turn:
    """One request of a session: its prompt (the whole context) and the output it will get."""

    index: int
    prompt: tuple[int, ...]
    output: tuple[int, ...]
    max_new_tokens: int
    blocks: list[int]
    """Chained hashes of the full blocks of `prompt + output` (and possibly beyond: the list is
    the session's, which only grows)."""
    with_output: tuple[int, ...]
    """`prompt + output`."""


@dataclass(eq=False)
class Session:
    """One agent session: its context so far and the RNG all its future draws come from."""

    index: int
    group: int
    kind: SessionKind
    context: tuple[int, ...]
    rng: random.Random
    block_size: int
    blocks: list[int] = field(default_factory=list)
    turns_done: int = 0
    finished: bool = False

    def __post_init__(self) -> None:
        self.turns_total = self.kind.turns.sample_int(self.rng)
        self.tokens = np.random.default_rng(self.rng.getrandbits(64))
        self._extend_blocks(self.context)

    @property
    def session_id(self) -> str:
        """The id the router sees (agent-rl's gateway passes one per session)."""
        return f"s{self.index}"

    def next_turn(self) -> Turn:
        """The next request: the context as prompt, and the output the model will produce."""
        room = self.kind.context_cap - len(self.context)
        length = min(self.kind.output_tokens.sample_int(self.rng), self.kind.max_new_tokens, room)
        output = _draw(self.tokens, length)
        with_output = self.context + output
        self._extend_blocks(with_output)
        return Turn(
            self.turns_done,
            self.context,
            output,
            self.kind.max_new_tokens,
            self.blocks,
            with_output,
        )

    def finish_turn(self, turn: Turn) -> float | None:
        """Append the output and the tool result; the pause before the next turn, or None when
        the session is over (turn count reached or the context cap too close)."""
        self.turns_done += 1
        tool = _draw(self.tokens, self.kind.tool_tokens.sample_int(self.rng))
        pause = self.kind.pause_s.sample(self.rng)
        context = turn.with_output + tool
        min_output = int(self.kind.output_tokens.low)
        if self.turns_done >= self.turns_total or len(context) + min_output > self.kind.context_cap:
            self.finished = True
            return None
        self.context = context
        self._extend_blocks(context)
        return pause

    def _extend_blocks(self, tokens: tuple[int, ...]) -> None:
        """Hash the full blocks of `tokens` not hashed yet (each hash chains its predecessor, as
        vLLM's block hashes do, so equal hashes mean equal prefixes)."""
        size = self.block_size
        blocks = self.blocks
        previous = blocks[-1] if blocks else 0
        for start in range(len(blocks) * size, len(tokens) - size + 1, size):
            previous = hash((previous, tokens[start : start + size]))
            blocks.append(previous)


_SWE_PAUSE = LogNormal(median=2.0, sigma=1.4, low=0.2, high=600.0)

SWE = Workload(
    name="swe",
    system_tokens=2000,
    group_size=8,
    kinds=(
        SessionKind(
            name="agent",
            share=1.0,
            turns=LogNormal(35, 0.6, 10, 100),
            task_tokens=LogNormal(1200, 0.5, 300, 6000),
            output_tokens=LogNormal(180, 0.8, 50, 2000),
            tool_tokens=LogNormal(350, 1.1, 20, 8000),
            pause_s=_SWE_PAUSE,
            context_cap=32_768,
            max_new_tokens=2048,
        ),
    ),
)

MIXED = Workload(
    name="mixed",
    system_tokens=1500,
    group_size=8,
    kinds=(
        SessionKind(
            name="chat",
            share=0.7,
            turns=LogNormal(2, 0.5, 1, 3),
            task_tokens=LogNormal(400, 1.0, 20, 8000),
            output_tokens=LogNormal(300, 0.9, 50, 2000),
            tool_tokens=LogNormal(150, 1.0, 10, 4000),
            pause_s=LogNormal(5.0, 1.0, 0.5, 300.0),
            context_cap=32_768,
            max_new_tokens=2048,
        ),
        SessionKind(
            name="long_agent",
            share=0.3,
            turns=LogNormal(30, 0.6, 10, 100),
            task_tokens=LogNormal(2000, 0.6, 300, 12000),
            output_tokens=LogNormal(250, 0.8, 50, 2000),
            tool_tokens=LogNormal(1500, 1.2, 50, 20000),
            pause_s=_SWE_PAUSE,
            context_cap=131_072,
            max_new_tokens=4096,
        ),
    ),
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (SWE, MIXED)}
