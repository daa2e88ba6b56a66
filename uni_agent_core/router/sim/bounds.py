"""How much a router could still gain on a rollout batch: bounds on its makespan.

A batch's throughput is its output tokens over its makespan, and every policy serves the same
output tokens (the workload does not depend on routing), so throughput ratios between policies
are inverse makespan ratios. Two yardsticks bound what better routing can buy:

- `makespan_floor`: each session alone on an idle replica with its whole history cached, so each
  turn computes only its new tokens (its first turn one token: the shared system prompt and task
  may be cached by another session) and decodes in a batch of one; the session's tool pauses are
  the workload's. No policy, on any number of replicas of this profile, finishes the batch
  sooner: an iteration is never cheaper than with nothing else in it, and nothing is prefilled
  that this floor does not also prefill. The session that sets it is named.
- `with_free_prefill`: the same profile with prefill costing nothing (no per-token or attention
  cost; an iteration still pays its fixed and decode costs). A simulation on it shows what a
  policy's placement would reach if its cache hit rate were perfect: the most any improvement to
  caching alone can give that policy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from uni_agent_core.router.sim.profiles import ReplicaProfile, prefill_pairs
from uni_agent_core.router.sim.workloads import Workload


@dataclass(frozen=True)
class MakespanFloor:
    """The makespan floor of a batch and the session that sets it."""

    makespan_s: float
    session_id: str
    pauses_s: float
    """That session's tool pauses."""
    serving_s: float
    """That session's requests served alone, with its history cached."""
    turns: int


def _alone_latency(profile: ReplicaProfile, cached: int, prompt: int, output: int) -> float:
    """Arrival to last token of one request alone on an idle replica with `cached` tokens of its
    prompt cached (at least the last prompt token is computed, as vLLM does)."""
    new = max(1, prompt - cached)
    start = prompt - new
    budget = profile.max_batch_tokens or new
    seconds = 0.0
    done = 0
    while done < new:  # chunked prefill; the last chunk's iteration samples the first token
        chunk = min(budget, new - done)
        seconds += profile.iteration_time(chunk, prefill_pairs(start + done, chunk), 0, 0)
        done += chunk
    for generated in range(1, output):
        seconds += profile.iteration_time(0, 0.0, 1, prompt + generated)
    return seconds


def makespan_floor(
    profile: ReplicaProfile, workload: Workload, sessions: int, seed: int
) -> MakespanFloor:
    """The makespan no routing of this batch can beat (see the module docstring).

    Args:
        profile: the replicas' cost profile.
        workload: the workload the batch is drawn from.
        sessions: sessions in the batch.
        seed: the batch's seed (the same sessions as `simulate(..., seed=seed)`).
    """
    if sessions < 1:
        raise ValueError(f"sessions must be at least 1, got {sessions}")
    floor: MakespanFloor | None = None
    for session in workload.sessions(sessions, seed, profile.block_size):
        pauses = serving = 0.0
        history = len(session.context) - 1
        while True:
            turn = session.next_turn()
            serving += _alone_latency(profile, history, len(turn.prompt), len(turn.output))
            history = len(turn.with_output)
            pause = session.finish_turn(turn)
            if pause is None:
                break
            pauses += pause
        total = pauses + serving
        if floor is None or total > floor.makespan_s:
            floor = MakespanFloor(total, session.session_id, pauses, serving, session.turns_done)
    assert floor is not None
    return floor


def with_free_prefill(profile: ReplicaProfile) -> ReplicaProfile:
    """`profile` with prefill costing nothing (see the module docstring)."""
    return replace(profile, name=f"{profile.name}+free_prefill", c_token_s=0.0, c_attn_pair_s=0.0)
