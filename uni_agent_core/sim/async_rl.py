"""A discrete-event model of async RL training on an 8-node cluster: sync vs the async modes.

It asks the question of Uni-Agent's mode comparison on a cluster of 8 nodes x 8 H200s training an
8B-class policy on SWE-like agent episodes: what do colocated async (partial rollout), fully
async (separate trainer and rollout pools) and role switching (the idle trainer pool serves
rollouts) do to wall clock and throughput against sync? Uni-Agent published, against sync:
colocated -35.4% wall clock, separate -38.1%, and role switching about +40% throughput over
fully async without it (`PUBLISHED`). This model is meant to reproduce the *direction* of those
figures from stated costs, not their magnitudes (see "Results" below: they differ, and why).

    from uni_agent_core.sim.async_rl import reproduce_uni_agent, format_table
    print(format_table(reproduce_uni_agent()))        # or: python bench/async_cluster.py

What is simulated
-----------------
A step trains on `tasks_per_step` GRPO groups of `group_size` samples (default 128 x 8 = 1,024
samples). A sample is one agent episode drawn from the repo's SWE workload (`workloads.SWE`:
10-100 turns, median 35; task median 1,200 tokens after a 2,000-token system prompt; output
median 180, tool result median 350 tokens; tool pause median 2 s with a long tail up to 10 min;
32K context cap), in `workloads.Session`'s order (turn count, then per turn output, tool result
and pause) from a per-episode RNG: episode i (in launch order) is the same in every mode. A turn
is generated on one rollout replica, then the episode waits for its tool (sandboxes run on CPUs,
so tool pauses continue while GPUs train), appends the result and sends the next turn. Sandbox
start-up and the final test run are not modelled (both would lengthen episodes, which favours
the async modes).

A rollout replica is one GPU running vLLM with the `VLLM_H200` profile (Llama-3.1-8B bf16 fits
without tensor parallelism), every constant from `profiles.py` and its cited sources:

- prefill: a turn first computes its uncached prompt, `c_token_s * n + c_attn_pair_s * pairs`;
  warm, that is the task (first turn) or the tool result (later turns: the previous output is
  cached); cold, the whole context but the system prompt every session shares. Prefills run
  FIFO and freeze decoding meanwhile (with vLLM's 8,192-token chunked prefill an iteration
  holding a chunk takes ~0.25 s, during which a decoder gains one token: nearly frozen);
- decode: processor sharing; every running turn gains one token per iteration of
  `t_fixed_s + sum(c_decode_seq_s + c_kv_read_s * context)` over the running turns (context at
  its mid-turn value), so a replica's token rate grows with its batch until the KV reads
  dominate (~1,700 tokens/s per GPU at 16K contexts);
- KV memory: a turn is admitted when its KV (context + output) fits beside the running turns in
  `kv_capacity_tokens` (825,536); otherwise it waits, FIFO;
- prefix cache: a session's context stays cached over its tool pause if its next turn returns to
  the same replica, no weight update came in between (new weights invalidate every KV, as verl's
  cache reset does), and the tokens the replica touched since (the KV of the turns it admitted)
  fit beside it in the capacity: an LRU stack-distance estimate that counts a session touched
  twice twice, so it errs toward eviction;
- routing: session affinity with a balance band, in the spirit of `token_load`: a turn stays on
  its session's replica while that replica holds at most `2 x least + affinity_band` (4) turns,
  else it moves to the least loaded replica (and prefills cold); new sessions go to the least
  loaded.

Training (`AsyncRLConfig.train_time_s`): the FLOPs of a step over `gpus x 989 TFLOPS x MFU`.
Per trajectory of L tokens (the final context: every turn's prompt and output): 8 N L for the
linear layers (6 N L forward + backward, the standard estimate, plus 2 N L for the forward pass
that recomputes the old log-probs before the update; no reference model: the Uni-Agent recipes
in `recipes/` train with `kl_coef: 0`) and 4 x 524,288 x L(L+1)/2 for attention (forward FLOPs
per query-key pair as in `profiles.py`: 32 layers x (2 x 4096 + 2 x 4096); x3 for forward +
backward, +1 for the log-prob pass); N = 8.03e9. ASSUMPTION: MFU 40%, a typical figure for FSDP
training of 7-8B dense models at long context (not measured here), independent of the GPU count
(linear scaling, which favours training on all 64 GPUs in sync and colocated). The SWE
trajectories average ~27K tokens, so a default step (1,024 samples, ~2.6e18 FLOPs) trains in
~104 s on 64 GPUs, ~208 s on 32 and ~416 s on 16.

Switch and sync costs (all ASSUMPTIONS of a few seconds; a step lasts minutes, so results barely
move with them):

- `hybrid_switch_s` = 5 s, each way, for sync and colocated (one pool): vLLM sleeps (weights and
  KV freed) and the FSDP state comes back, then the new weights go to vLLM and it wakes. The
  transfers are small: the trainer state (fp32 master weights, gradients and Adam moments, 16
  bytes a parameter) is 2 GB per GPU over 64 GPUs, the bf16 weights 16.06 GB per GPU; over PCIe
  Gen5 x16 (~50 GB/s) 0.04 + 0.32 s. The rest is engine and allocator re-initialisation;
- `role_switch_s` = 5 s, each way, the same operation for the trainer pool lending itself;
- `weight_push_s` = 2 s (separate modes): 16.06 GB of bf16 weights broadcast over NCCL on the
  InfiniBand fabric (one 400 Gb/s NIC per GPU on HGX H200 = 50 GB/s, at 80%: 0.40 s), plus
  pausing the engines, loading the weights and resetting the caches (1.6 s). The rollout pool
  pauses meanwhile.

Modes
-----
- `sync`: all 64 GPUs generate the step's 1,024 episodes, waiting for the slowest group; switch;
  all 64 train; switch. On-policy (staleness 0).
- `colocated` (Uni-Agent / verl colocated async, partial rollout): one pool of 64 GPUs keeps
  groups in flight ahead of the trainer; when a batch's worth of groups has finished (in
  completion order), generation pauses (in-flight turns freeze, tool pauses go on), the pool
  switches, trains and switches back, and generation resumes on the new weights: running turns
  prefill their context again and keep their tokens. Stragglers carry over to later steps.
- `separate`: a trainer pool of `trainer_nodes` nodes and a rollout pool of the rest run
  concurrently; the trainer waits (idle) until a batch's worth of groups is ready, trains, and
  pushes the weights (the rollout pool pauses for the push and resumes on the new weights).
- `separate_role_switching`: as `separate`, but when the trainer would wait it lends its GPUs
  as extra rollout replicas (after `role_switch_s`); when the batch is ready it reclaims them:
  their running turns move to the rollout pool (prefilling their context again there), and it
  trains after `role_switch_s`.

The async modes launch groups as agent-rl's step loop does (`rl/step_loop.py`, staleness policy
`wait`): by step s at most `(s + max_staleness + 1) x tasks_per_step` groups (plus those dropped)
have been launched, and the trainer takes finished groups in completion order, dropping a group
(and launching one more) when its oldest sample is more than `max_staleness` (default 1) versions
behind the trainer. A sample's version is the rollout weight version of its first token.

Pool split: `trainer_nodes` = 4 of 8 by default. It is the split that gives `separate` (without
role switching) its shortest wall clock in this model (8 steps, seed 0, trainer nodes 1 to 6:
2.03, 1.40, 1.21, 1.13, 1.17, 1.68 h; with 2 nodes training, ~416 s a step, is the bottleneck;
with 5 the 24-GPU rollout pool is), and Uni-Agent's own separate recipe has the same 1:1 ratio
(1 trainer node, 1 rollout node: `recipes/qwen3.5-9b-swerebench-grpo-gpu.yaml`). Batch: 128 x 8,
16 samples per GPU per step (that recipe: 64 x 8 on 2 nodes, 32 per GPU); with two batches in
flight the async modes hold ~32 sessions per GPU, which fills the replicas' KV in the 32-GPU
rollout pool of `separate`.

Metrics (`TrainingSimResult`)
-----------------------------
- wall clock: until the last of `steps` steps has trained and synced its weights;
- samples/s: samples trained / wall clock (dropped ones do not count);
- trainer idle: the fraction of wall clock the trainer's GPUs have no role (waiting for data
  without lending themselves). Zero in sync and colocated, where those GPUs generate when they
  do not train; switches and weight pushes are counted apart (`trainer_switch_s`);
- rollout util: busy / available replica-seconds, where a replica is available while it serves
  rollouts (not paused for training or a weight push, lent replicas while lent) and busy while
  it holds a turn prefilling or decoding (nvidia-smi's notion: it says nothing of batch size);
- staleness: trainer version - the group's oldest sample version, averaged over trained samples.

Results: `python bench/async_cluster.py`; the last measured table, and how it departs from
Uni-Agent's published figures and why, are in `bench/README.md` ("Training modes on a cluster").
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from operator import attrgetter
from typing import Any

from uni_agent_core.router.sim.profiles import VLLM_H200, ReplicaProfile, prefill_pairs
from uni_agent_core.router.sim.workloads import SWE, SessionKind, Workload

MODES: tuple[str, ...] = ("sync", "colocated", "separate", "separate_role_switching")
"""The training modes `simulate_training` runs."""

PUBLISHED = {
    "colocated_wall_change": -0.354,
    "separate_wall_change": -0.381,
    "role_switching_throughput_gain": 0.40,
}
"""Uni-Agent's published figures: wall clock of colocated async (partial rollout) and of fully
async (separate pools) relative to sync, and the throughput gain of role switching over fully
async without it."""


@dataclass(frozen=True)
class AsyncRLConfig:
    """The cluster, the RL batch and the costs of one simulated training run."""

    nodes: int = 8
    gpus_per_node: int = 8
    trainer_nodes: int = 4
    """Nodes of the trainer pool in the `separate` modes (the rest serve rollouts)."""
    tasks_per_step: int = 128
    """Tasks (GRPO groups) per training step."""
    group_size: int = 8
    """Samples per task (the GRPO group)."""
    steps: int = 8
    max_staleness: int = 1
    """Most policy versions between a group's oldest token and the trainer (async modes)."""
    profile: ReplicaProfile = VLLM_H200
    """Cost of one rollout replica: one GPU (an 8B model in bf16 needs no tensor parallelism)."""
    workload: Workload = SWE
    params: float = 8.03e9
    """Parameters of the trained model (Llama-3.1-8B, as the profile)."""
    peak_flops: float = 989e12
    """H200 dense BF16 peak (datasheet; the 1,979 TFLOPS figure is with sparsity)."""
    train_mfu: float = 0.40
    """Model FLOPs utilisation of the trainer (FSDP2 + sequence parallelism). ASSUMPTION."""
    attn_flops_per_pair: float = 524_288.0
    """Forward attention FLOPs per query-key pair: 32 layers x (2 x 4096 QK^T + 2 x 4096 PV)."""
    hybrid_switch_s: float = 5.0
    """One switch of a GPU pool between vLLM and the trainer (sync, colocated), each way."""
    role_switch_s: float = 5.0
    """One switch of the trainer pool to rollout replicas or back (role switching), each way."""
    weight_push_s: float = 2.0
    """Pushing new weights from the trainer pool to the rollout pool (separate modes)."""
    affinity_band: int = 4
    """A session's next turn stays on its replica while that replica holds at most
    `2 x least + affinity_band` turns; otherwise it moves to the least loaded one (cold)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def trainer_gpus(self) -> int:
        return self.trainer_nodes * self.gpus_per_node

    @property
    def rollout_gpus(self) -> int:
        return self.gpus - self.trainer_gpus

    @property
    def samples_per_step(self) -> int:
        return self.tasks_per_step * self.group_size

    def train_time_s(self, lengths: Sequence[int], gpus: int) -> float:
        """Seconds to train on trajectories of `lengths` tokens with `gpus` GPUs (see module)."""
        flops = 0.0
        for n in lengths:
            flops += 8.0 * self.params * n + 4.0 * self.attn_flops_per_pair * n * (n + 1) / 2
        return flops / (gpus * self.peak_flops * self.train_mfu)


@dataclass
class TrainingSimResult:
    """What one simulated training run measured (definitions in the module docstring)."""

    mode: str
    seed: int
    nodes: int
    trainer_gpus: int
    rollout_gpus: int
    steps: int
    samples_per_step: int
    wall_s: float
    samples_per_s: float
    samples_launched: int
    samples_trained: int
    samples_dropped: int
    samples_ready: int
    """Finished groups' samples waiting for a step when the run ended."""
    samples_in_flight: int
    """Samples of groups not finished when the run ended."""
    tokens_generated: int
    tokens_trained: int
    train_s: float
    trainer_wait_s: float
    trainer_lent_s: float
    trainer_switch_s: float
    """Pool switches, role switches and weight pushes (the trainer's time spent on them)."""
    trainer_idle_frac: float
    rollout_util: float
    staleness_mean: float
    staleness_max: int
    kv_peak_frac: float
    """Peak KV a replica held for running turns / its capacity."""
    prefill_tokens: int
    """Prompt tokens the replicas computed (cache misses and recomputation included)."""
    cold_prefill_frac: float
    """Prefills that found no cached prefix of their session (weight updates, moves, LRU)."""
    step_end_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- simulation ---------------------------------------------------------------------------------

_REPLICA, _ARRIVE, _CALL = 0, 1, 2
_load = attrgetter("n")


class _Group:
    __slots__ = ("index", "done", "oldest", "episodes")

    def __init__(self, index: int) -> None:
        self.index = index
        self.done = 0
        self.oldest = 1 << 30
        self.episodes: list[_Episode] = []


class _Episode:
    __slots__ = (
        "index",
        "group",
        "kind",
        "rng",
        "ctx",
        "new",
        "turns_total",
        "turns_done",
        "version",
        "home",
        "epoch",
        "seen",
        "length",
    )

    def __init__(
        self, index: int, group: _Group, kind: SessionKind, ctx: int, task: int, seed: int
    ) -> None:
        self.index = index
        self.group = group
        self.kind = kind
        self.rng = random.Random(f"{seed}/episode/{index}")
        self.turns_total = kind.turns.sample_int(self.rng)
        self.ctx = ctx
        self.new = task
        self.turns_done = 0
        self.version = -1
        self.home: _Replica | None = None
        self.epoch = -1
        self.seen = 0.0
        self.length = 0


class _Turn:
    __slots__ = ("episode", "ctx", "new", "out", "done_out", "kv", "cost", "prefill_s")

    def __init__(self, episode: _Episode, ctx: int, new: int, out: int, cost: float) -> None:
        self.episode = episode
        self.ctx = ctx
        self.new = new
        self.out = out
        self.done_out = 0
        self.kv = ctx + out
        self.cost = cost
        self.prefill_s = 0.0


class _Replica:
    """Processor sharing with a decode clock: every running turn gets one token per iteration of
    `t_fixed + sum(c_decode + c_kv * context)`; prefills run first, FIFO, and freeze decode."""

    __slots__ = (
        "index",
        "t_fixed",
        "capacity",
        "clock",
        "t_last",
        "decoding",
        "dec_cost",
        "prefilling",
        "waiting",
        "kv_used",
        "n",
        "serving",
        "paused",
        "epoch",
        "ev",
        "busy_s",
        "avail_s",
        "kv_peak",
        "touched",
    )

    def __init__(self, index: int, profile: ReplicaProfile) -> None:
        self.index = index
        self.t_fixed = profile.t_fixed_s
        self.capacity = profile.kv_capacity_tokens or (1 << 62)
        self.clock = 0.0
        self.t_last = 0.0
        self.decoding: list[tuple[float, int, _Turn]] = []
        self.dec_cost = 0.0
        self.prefilling: deque[_Turn] = deque()
        self.waiting: deque[_Turn] = deque()
        self.kv_used = 0
        self.n = 0
        self.serving = False
        self.paused = False
        self.epoch = 0
        self.ev = 0
        self.busy_s = 0.0
        self.avail_s = 0.0
        self.kv_peak = 0
        self.touched = 0.0

    def advance(self, now: float) -> None:
        dt = now - self.t_last
        self.t_last = now
        if dt <= 0.0 or not self.serving or self.paused:
            return
        self.avail_s += dt
        if self.prefilling:
            self.busy_s += dt
            self.prefilling[0].prefill_s -= dt
        elif self.decoding:
            self.busy_s += dt
            self.clock += dt / (self.t_fixed + self.dec_cost)

    def next_event(self) -> float | None:
        if not self.serving or self.paused:
            return None
        if self.prefilling:
            return self.t_last + max(0.0, self.prefilling[0].prefill_s)
        if self.decoding:
            left = max(0.0, self.decoding[0][0] - self.clock)
            return self.t_last + left * (self.t_fixed + self.dec_cost)
        return None

    def take_all(self) -> list[_Turn]:
        """Remove every turn (running ones keep the tokens they have generated)."""
        turns = [t for _, _, t in sorted(self.decoding)]
        for finish, _, turn in self.decoding:
            left = max(1, round(finish - self.clock))
            turn.done_out += turn.out - left
            turn.out = left
        turns.extend(self.prefilling)
        turns.extend(self.waiting)
        self.decoding = []
        self.dec_cost = 0.0
        self.clock = 0.0
        self.prefilling = deque()
        self.waiting = deque()
        self.kv_used = 0
        self.n = 0
        return turns


class _Sim:
    def __init__(self, mode: str, config: AsyncRLConfig, seed: int) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; one of {', '.join(MODES)}")
        if mode.startswith("separate") and not 0 < config.trainer_nodes < config.nodes:
            raise ValueError("separate modes need 0 < trainer_nodes < nodes")
        self.mode = mode
        self.c = config
        self.seed = seed
        self.p = config.profile
        self.pooled = mode in ("sync", "colocated")
        self.switching = mode == "separate_role_switching"
        self.bound = 0 if mode == "sync" else config.max_staleness
        n_rollout = config.gpus if self.pooled else config.rollout_gpus
        self.pool = [_Replica(i, self.p) for i in range(n_rollout)]
        self.lent = (
            [_Replica(n_rollout + i, self.p) for i in range(config.trainer_gpus)]
            if self.switching
            else []
        )
        for r in self.pool:
            r.serving = True
        self.routable: list[_Replica] = list(self.pool)
        self.train_gpus = config.gpus if self.pooled else config.trainer_gpus
        self.events: list[tuple[float, int, int, Any, int]] = []
        self.serial = 0
        self.now = 0.0
        self.stop = False
        # rollout and trainer state
        self.tv = 0
        self.rv = 0
        self.step = 0
        self.groups_launched = 0
        self.episodes_launched = 0
        self.dropped_groups = 0
        self.live_groups: set[_Group] = set()
        self.ready: deque[_Group] = deque()
        self.batch: list[_Group] = []
        self.taking = False
        self.reclaim_pending = False
        self.tstate = "rollout" if self.pooled else "waiting"
        self.tsince = 0.0
        self.ttime: dict[str, float] = {}
        self.trained: list[_Group] = []
        self.staleness: list[int] = []
        self.tokens_generated = 0
        self.prefill_tokens = 0
        self.prefills = 0
        self.cold_prefills = 0
        self.step_end: list[float] = []

    # -- events -----------------------------------------------------------------------------

    def _push(self, at: float, kind: int, payload: Any, version: int = 0) -> None:
        self.serial += 1
        heapq.heappush(self.events, (at, self.serial, kind, payload, version))

    def _call(self, delay: float, fn: Callable[[], None]) -> None:
        self._push(self.now + delay, _CALL, fn)

    def _schedule(self, r: _Replica) -> None:
        r.ev += 1
        at = r.next_event()
        if at is not None:
            self._push(at, _REPLICA, r, r.ev)

    def run(self) -> TrainingSimResult:
        self._start_step()
        events = self.events
        while events and not self.stop:
            at, _, kind, payload, version = heapq.heappop(events)
            self.now = at
            if kind == _REPLICA:
                if version == payload.ev:
                    self._replica_event(payload)
            elif kind == _ARRIVE:
                self._arrive(payload)
            else:
                payload()
        return self._result()

    # -- rollout ----------------------------------------------------------------------------

    def _launch_group(self) -> None:
        group = _Group(self.groups_launched)
        self.groups_launched += 1
        self.live_groups.add(group)
        grng = random.Random(f"{self.seed}/group/{group.index}")
        kinds = self.c.workload.kinds
        kind = grng.choices(kinds, weights=[k.share for k in kinds])[0]
        task = kind.task_tokens.sample_int(grng)
        ctx = self.c.workload.system_tokens + task
        for _ in range(self.c.group_size):
            ep = _Episode(self.episodes_launched, group, kind, ctx, task, self.seed)
            self.episodes_launched += 1
            group.episodes.append(ep)
            self._push(self.now, _ARRIVE, ep)

    def _fill(self) -> None:
        allowed = (self.step + self.bound + 1) * self.c.tasks_per_step + self.dropped_groups
        while self.groups_launched < allowed:
            self._launch_group()

    def _route(self, ep: _Episode) -> _Replica:
        home = ep.home
        band = self.c.affinity_band
        if home is not None and home.serving and home.n <= band:
            return home  # within the band of any replica: no need to look for the least loaded
        least = min(self.routable, key=_load)
        if home is not None and home.serving and home.n <= 2 * least.n + band:
            return home
        return least

    def _arrive(self, ep: _Episode) -> None:
        kind = ep.kind
        room = kind.context_cap - ep.ctx
        out = min(kind.output_tokens.sample_int(ep.rng), kind.max_new_tokens, room)
        p = self.p
        cost = p.c_decode_seq_s + p.c_kv_read_s * (ep.ctx + out / 2)
        self._enqueue(self._route(ep), _Turn(ep, ep.ctx, ep.new, out, cost))

    def _enqueue(self, r: _Replica, turn: _Turn) -> None:
        r.advance(self.now)
        r.n += 1
        r.waiting.append(turn)
        self._admit(r)
        self._schedule(r)

    def _prefill_s(self, r: _Replica, turn: _Turn) -> float:
        ep = turn.episode
        self.prefills += 1
        if (
            ep.home is r
            and ep.epoch == r.epoch
            and not turn.done_out
            and r.touched - ep.seen <= r.capacity - turn.ctx
        ):
            n = turn.new
            start = turn.ctx - n
        else:  # cold: the whole context but the system prompt every session shares
            self.cold_prefills += 1
            start = self.c.workload.system_tokens
            n = turn.ctx + turn.done_out - start
        self.prefill_tokens += n
        p = self.p
        return p.c_token_s * n + p.c_attn_pair_s * prefill_pairs(start, n)

    def _admit(self, r: _Replica) -> None:
        while r.waiting and (r.kv_used == 0 or r.kv_used + r.waiting[0].kv <= r.capacity):
            turn = r.waiting.popleft()
            r.kv_used += turn.kv
            r.kv_peak = max(r.kv_peak, r.kv_used)
            turn.prefill_s = self._prefill_s(r, turn)
            r.touched += turn.kv
            r.prefilling.append(turn)

    def _replica_event(self, r: _Replica) -> None:
        r.advance(self.now)
        finished: list[_Turn] = []
        if r.prefilling:
            if r.prefilling[0].prefill_s <= 1e-9:
                turn = r.prefilling.popleft()
                self.serial += 1
                heapq.heappush(r.decoding, (r.clock + turn.out, self.serial, turn))
                r.dec_cost += turn.cost
                ep = turn.episode
                ep.home = r
                ep.epoch = r.epoch
                if ep.version < 0:
                    ep.version = self.rv
        else:
            decoding = r.decoding
            while decoding and decoding[0][0] <= r.clock + 1e-6:
                turn = heapq.heappop(decoding)[2]
                r.dec_cost -= turn.cost
                r.kv_used -= turn.kv
                r.n -= 1
                turn.episode.seen = r.touched
                finished.append(turn)
            if not decoding:
                r.dec_cost = 0.0
        self._admit(r)
        self._schedule(r)
        for turn in finished:
            self._turn_done(turn)

    def _turn_done(self, turn: _Turn) -> None:
        ep = turn.episode
        kind = ep.kind
        self.tokens_generated += turn.out
        out = turn.out + turn.done_out
        ep.turns_done += 1
        tool = kind.tool_tokens.sample_int(ep.rng)
        pause = kind.pause_s.sample(ep.rng)
        context = turn.ctx + out + tool
        if ep.turns_done >= ep.turns_total or context + int(kind.output_tokens.low) > (
            kind.context_cap
        ):
            ep.length = turn.ctx + out
            group = ep.group
            group.done += 1
            group.oldest = min(group.oldest, ep.version)
            if group.done == self.c.group_size:
                self.live_groups.discard(group)
                self.ready.append(group)
                self._try_take()
            return
        ep.ctx = context
        ep.new = tool
        self._push(self.now + pause, _ARRIVE, ep)

    def _pause(self, replicas: Sequence[_Replica]) -> None:
        for r in replicas:
            r.advance(self.now)
            r.paused = True
            r.ev += 1

    def _resume_cold(self, replicas: Sequence[_Replica]) -> None:
        """New weights: every cached KV is invalid; running turns prefill their context again."""
        for r in replicas:
            r.advance(self.now)
            r.paused = False
            r.epoch += 1
            waiting, r.waiting = r.waiting, deque()
            for turn in r.take_all():  # running and prefilling turns keep their KV reservation
                r.n += 1
                r.kv_used += turn.kv
                turn.prefill_s = self._prefill_s(r, turn)
                r.touched += turn.kv
                r.prefilling.append(turn)
            r.n += len(waiting)
            r.waiting = waiting
            self._admit(r)
            self._schedule(r)

    # -- trainer ----------------------------------------------------------------------------

    def _trainer(self, state: str) -> None:
        self.ttime[self.tstate] = self.ttime.get(self.tstate, 0.0) + self.now - self.tsince
        self.tstate = state
        self.tsince = self.now

    def _start_step(self) -> None:
        if self.step >= self.c.steps:
            self._trainer("done")
            self.stop = True
            return
        if self.mode == "sync":
            for _ in range(self.c.tasks_per_step):
                self._launch_group()
        else:
            self._fill()
        self._trainer("rollout" if self.pooled else "waiting")
        self.taking = True
        self._try_take()
        if self.taking and self.switching:
            self._trainer("lend_switch")
            self._call(self.c.role_switch_s, self._lent_ready)

    def _try_take(self) -> None:
        if not self.taking:
            return
        need = self.c.tasks_per_step
        while len(self.batch) < need and self.ready:
            group = self.ready.popleft()
            if self.tv - group.oldest > self.bound:
                self.dropped_groups += 1
                self._fill()
                continue
            self.batch.append(group)
        if len(self.batch) == need:
            self.taking = False
            self._batch_ready()

    def _batch_ready(self) -> None:
        if self.pooled:
            self._pause(self.pool)
            self._trainer("switch")
            self._call(self.c.hybrid_switch_s, self._train)
        elif self.tstate == "lend_switch":
            self.reclaim_pending = True
        elif self.tstate == "lent":
            self._reclaim()
        else:
            self._train()

    def _lent_ready(self) -> None:
        if self.reclaim_pending:
            self.reclaim_pending = False
            self._trainer("switch")
            self._call(self.c.role_switch_s, self._train)
            return
        self._trainer("lent")
        for r in self.lent:
            r.advance(self.now)
            r.serving = True
            r.epoch += 1
        self.routable = self.pool + self.lent

    def _reclaim(self) -> None:
        """The batch is ready: the lent GPUs leave the rollout pool; their running turns resume
        on the pool's replicas (prefilling their context again, as a partial rollout does)."""
        self._trainer("switch")
        self.routable = list(self.pool)
        moved: list[_Turn] = []
        for r in self.lent:
            r.advance(self.now)
            r.serving = False
            r.ev += 1
            moved.extend(r.take_all())
        for turn in moved:
            turn.episode.home = None
            turn.kv = turn.ctx + turn.done_out + turn.out
            self._enqueue(self._route(turn.episode), turn)
        self._call(self.c.role_switch_s, self._train)

    def _train(self) -> None:
        self._trainer("train")
        batch, self.batch = self.batch, []
        lengths = [ep.length for g in batch for ep in g.episodes]
        for group in batch:
            self.staleness.extend([self.tv - group.oldest] * len(group.episodes))
        self.trained.extend(batch)
        self._call(self.c.train_time_s(lengths, self.train_gpus), self._after_train)

    def _after_train(self) -> None:
        if self.pooled:
            self._trainer("switch")
            self._call(self.c.hybrid_switch_s, self._updated)
        else:
            self._trainer("push")
            self._pause(self.pool)
            self._call(self.c.weight_push_s, self._updated)

    def _updated(self) -> None:
        self.tv += 1
        self.rv = self.tv
        self._resume_cold(self.pool)
        self.step += 1
        self.step_end.append(self.now)
        self._start_step()

    # -- result -----------------------------------------------------------------------------

    def _result(self) -> TrainingSimResult:
        c = self.c
        wall = self.now
        t = self.ttime
        replicas = self.pool + self.lent
        for r in replicas:
            r.advance(wall)
        avail = sum(r.avail_s for r in replicas)
        busy = sum(r.busy_s for r in replicas)
        size = c.group_size
        trained = len(self.trained) * size
        return TrainingSimResult(
            mode=self.mode,
            seed=self.seed,
            nodes=c.nodes,
            trainer_gpus=self.train_gpus,
            rollout_gpus=len(self.pool),
            steps=self.step,
            samples_per_step=c.samples_per_step,
            wall_s=wall,
            samples_per_s=trained / wall if wall > 0 else 0.0,
            samples_launched=self.episodes_launched,
            samples_trained=trained,
            samples_dropped=self.dropped_groups * size,
            samples_ready=(len(self.ready) + len(self.batch)) * size,
            samples_in_flight=len(self.live_groups) * size,
            tokens_generated=self.tokens_generated,
            tokens_trained=sum(ep.length for g in self.trained for ep in g.episodes),
            train_s=t.get("train", 0.0),
            trainer_wait_s=t.get("waiting", 0.0),
            trainer_lent_s=t.get("lent", 0.0),
            trainer_switch_s=t.get("switch", 0.0) + t.get("lend_switch", 0.0) + t.get("push", 0.0),
            trainer_idle_frac=t.get("waiting", 0.0) / wall if wall > 0 else 0.0,
            rollout_util=busy / avail if avail > 0 else 0.0,
            staleness_mean=sum(self.staleness) / len(self.staleness) if self.staleness else 0.0,
            staleness_max=max(self.staleness, default=0),
            kv_peak_frac=max(r.kv_peak for r in replicas) / self.pool[0].capacity,
            prefill_tokens=self.prefill_tokens,
            cold_prefill_frac=self.cold_prefills / self.prefills if self.prefills else 0.0,
            step_end_s=list(self.step_end),
        )


def simulate_training(
    mode: str, config: AsyncRLConfig | None = None, seed: int = 0
) -> TrainingSimResult:
    """Simulate `config.steps` training steps in `mode` (one of `MODES`); deterministic in seed."""
    return _Sim(mode, config or AsyncRLConfig(), seed).run()


# -- the Uni-Agent comparison -------------------------------------------------------------------


@dataclass
class UniAgentComparison:
    """The four modes on one config and seed, and the ratios Uni-Agent published."""

    results: list[TrainingSimResult]

    def by_mode(self, mode: str) -> TrainingSimResult:
        return next(r for r in self.results if r.mode == mode)

    @property
    def colocated_wall_change(self) -> float:
        """Wall clock of colocated async relative to sync, minus 1 (negative: faster)."""
        return self.by_mode("colocated").wall_s / self.by_mode("sync").wall_s - 1.0

    @property
    def separate_wall_change(self) -> float:
        """Wall clock of separate async (no role switching) relative to sync, minus 1."""
        return self.by_mode("separate").wall_s / self.by_mode("sync").wall_s - 1.0

    @property
    def role_switching_throughput_gain(self) -> float:
        """Samples/s of separate async with role switching over without it, minus 1."""
        return (
            self.by_mode("separate_role_switching").samples_per_s
            / self.by_mode("separate").samples_per_s
            - 1.0
        )

    def ratios(self) -> dict[str, float]:
        return {
            "colocated_wall_change": self.colocated_wall_change,
            "separate_wall_change": self.separate_wall_change,
            "role_switching_throughput_gain": self.role_switching_throughput_gain,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "results": [r.to_dict() for r in self.results],
            "ratios": self.ratios(),
            "published": dict(PUBLISHED),
        }


def reproduce_uni_agent(config: AsyncRLConfig | None = None, seed: int = 0) -> UniAgentComparison:
    """Run the four modes (`MODES`) on the same config and seed."""
    config = config or AsyncRLConfig()
    return UniAgentComparison([simulate_training(m, config, seed) for m in MODES])


def format_table(results: UniAgentComparison | Sequence[TrainingSimResult]) -> str:
    """A markdown table of the modes (ratios to `sync` and to `separate` where present) and a
    line comparing the ratios with Uni-Agent's published figures."""
    rows = results.results if isinstance(results, UniAgentComparison) else list(results)
    base = next((r for r in rows if r.mode == "sync"), None)
    separate = next((r for r in rows if r.mode == "separate"), None)
    lines = [
        "| mode | wall clock (h) | vs sync | samples/s | vs sync | throughput vs separate "
        "| trainer idle | rollout util | staleness mean |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def pct(value: float) -> str:
        return f"{value * 100:+.1f}%"

    for r in rows:
        vs_wall = pct(r.wall_s / base.wall_s - 1) if base else "n/a"
        vs_thru = f"{r.samples_per_s / base.samples_per_s:.2f}x" if base else "n/a"
        vs_sep = f"{r.samples_per_s / separate.samples_per_s:.2f}x" if separate else "n/a"
        lines.append(
            f"| {r.mode} | {r.wall_s / 3600:.2f} | {vs_wall} | {r.samples_per_s:.3f} "
            f"| {vs_thru} | {vs_sep} | {r.trainer_idle_frac * 100:.0f}% "
            f"| {r.rollout_util * 100:.0f}% | {r.staleness_mean:.2f} |"
        )
    modes = {r.mode for r in rows}
    if {"sync", "colocated", "separate", "separate_role_switching"} <= modes:
        cmp = results if isinstance(results, UniAgentComparison) else UniAgentComparison(rows)
        lines.append("")
        lines.append(
            "Uni-Agent published vs this model: colocated wall clock "
            f"{pct(PUBLISHED['colocated_wall_change'])} vs {pct(cmp.colocated_wall_change)}; "
            f"separate {pct(PUBLISHED['separate_wall_change'])} vs "
            f"{pct(cmp.separate_wall_change)}; role switching throughput "
            f"{pct(PUBLISHED['role_switching_throughput_gain'])} vs "
            f"{pct(cmp.role_switching_throughput_gain)} (direction, not magnitude, is the claim)."
        )
    return "\n".join(lines)
