"""One simulated inference replica: a continuous-batching engine over a real prefix cache.

The replica owns the ground truth the router only estimates: which prefixes its KV cache holds
(a `PrefixTree` over chained block hashes, so only whole blocks are cached and matched, as in
vLLM), which requests wait, prefill and decode, and what each scheduler iteration costs
(`ReplicaProfile.iteration_time`). Its scheduler follows vLLM V1:

1. running requests first: every decoding request gets one token; requests still prefilling get
   chunks of their uncached prompt within the iteration's token budget (chunked prefill);
2. then waiting requests in FCFS order while the budget, `max_seqs` and KV memory allow: a request
   is admitted with the longest cached prefix of its prompt (a cache hit: those tokens are not
   computed; a fully cached prompt still computes its last token), the rest of its prompt is
   allocated, and cached prefixes nobody uses are evicted, least recently used first, to make
   room. The head of the queue blocks those behind it;
3. the request whose prefill completes samples its first token in that iteration.

Memory (`kv_capacity_tokens` set, vLLM): running requests' KV (prompt and generated tokens) and
the prefix cache share the capacity. Blocks a running request uses are pinned; unpinned cached
blocks are evictable. When decoding needs more KV than is free, the most recently admitted
request is preempted (vLLM V1's recompute preemption): its computed blocks stay cached, and it
waits at the head of the queue to be re-admitted with prompt + tokens generated so far. With
`kv_capacity_tokens` None (`HFEngine`), running KV is unbounded and the prefix cache is a
separate LRU of `cache_capacity_tokens` filled with each finished request's prompt and output.

Caching (unified memory, vLLM V1): a prompt block joins the cache, pinned by its request, as soon
as a scheduled chunk fills it, so a request admitted in the same or a later iteration reuses it
while its first user is still running (vLLM's design doc, "Automatic Prefix Caching": "If an
allocated block is already full of tokens, we immediately add it to the cache block, so that the
block can be reused by other requests in the same batch"). This is what lets a GRPO group that
arrives at once compute its shared task prompt once. Generated blocks join when the request
finishes (or is preempted), as the most recently used; only the same session's next turn reuses
them, and it comes after. Two requests that computed the same block side by side (the second was
admitted before the first scheduled it) hold one cached copy in this model; vLLM keeps the
duplicate until the request ends. With a separate cache (`HFEngine`) a request's prompt and
output join the cache when it finishes, as `HFEngine` does.

Time: an iteration's cost is priced from its prefill chunks, decoding sequences and their
contexts. Runs of pure-decode iterations (no prefill, nothing admissible) are simulated as one
step of k iterations, k up to the next request to finish or the next KV overflow, with the exact
sum of the per-iteration costs (contexts grow by one token per iteration); an arrival cuts such a
step short at the iteration boundary after it, so aggregation changes no result.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from uni_agent_core.router.prefix_tree import PrefixTree
from uni_agent_core.router.sim.profiles import ReplicaProfile, prefill_pairs

WAITING, PREFILL, DECODE, DONE = "waiting", "prefill", "decode", "done"


@dataclass(eq=False)
class Job:
    """A request as an engine sees it."""

    key: Any
    """The cluster's handle for the request."""
    prompt_len: int
    output_len: int
    blocks: list[int]
    """Chained hashes of the full blocks of prompt + output (a prefix of this list)."""
    arrival: float
    generated: int = 0
    state: str = WAITING
    first_admission: bool = True
    cached_tokens: int = 0
    """Prompt tokens served from the cache at the first admission."""
    admitted_len: int = 0
    """Prompt length at the current admission (prompt + tokens generated before a preemption)."""
    computed: int = 0
    """Tokens of `admitted_len` whose KV exists (cached or computed)."""
    pinned: int = 0
    """Blocks of the prompt path this request pins in the cache."""
    own: int = 0
    """KV tokens held outside the cache tree (uncomputed and partial-block prompt, generated);
    for a decoding request, as of `decode_start`."""
    decode_start: int = 0
    gen_base: int = 0
    finish_at: int = 0
    first_token_at: float = 0.0
    finished_at: float = 0.0


@dataclass
class ReplicaStats:
    """Totals of one replica over a run."""

    busy_s: float = 0.0
    iterations: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    prefill_tokens: int = 0
    """Prompt tokens computed, including recomputation after preemption."""
    decode_tokens: int = 0
    evicted_tokens: int = 0
    preemptions: int = 0
    requests: int = 0


@dataclass
class _Step:
    start: float
    duration: float
    chunks: list[tuple[Job, int]]
    iterations: int
    n_decode: int
    context0: int


@dataclass
class Replica:
    """A continuous-batching engine replica (see the module docstring)."""

    index: int
    profile: ReplicaProfile
    stats: ReplicaStats = field(default_factory=ReplicaStats)

    def __post_init__(self) -> None:
        profile = self.profile
        self.block = profile.block_size
        self.unified = profile.kv_capacity_tokens is not None
        self.capacity = profile.kv_capacity_tokens or 0
        cache_blocks = None if self.unified else (profile.cache_capacity_tokens or 0) // self.block
        self.caching = cache_blocks is None or cache_blocks > 0
        """False: a separate prefix cache of capacity 0, i.e. none."""
        self.cache = PrefixTree(cache_blocks, id_bytes=8)
        self.pinned = PrefixTree(None, id_bytes=8)
        """Union of the pinned prompt paths (unified memory): its size is the cache's pinned
        part, which `PrefixTree` does not report."""
        self.own_tokens = 0
        self.waiting: deque[Job] = deque()
        self.prefilling: list[Job] = []
        self.running: list[Job] = []
        self.counter = 0
        """Decode iterations run so far; a decoding request's progress is counted from it."""
        self._heap: list[tuple[int, int, Job]] = []
        self._serial = 0
        self.n_decode = 0
        self.context_sum = 0
        self.step: _Step | None = None
        self.version = 0
        self._blocked: Job | None = None
        """The head of the queue that did not fit; not retried until memory is released."""

    # -- state the router may read -------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """Whether a step is in flight."""
        return self.step is not None

    def free_kv_tokens(self) -> int | None:
        """KV tokens not held by running requests (what vLLM reports as free); None: unbounded."""
        if not self.unified:
            return None
        return self.capacity - self._nonevictable()

    def cached_tokens(self) -> int:
        """Prompt tokens whose KV is resident: the prefix cache, plus (unified memory) the
        computed prompts of running requests, which vLLM caches block by block as it computes
        them (the router's model holds in-flight prompts too). `HFEngine` reports its prefix
        cache only."""
        cached = self.cache.size * self.block
        if self.unified:
            cached += sum(max(0, job.computed - job.pinned * self.block) for job in self.running)
        return cached

    # -- the cluster's calls ---------------------------------------------------------------------

    def enqueue(self, job: Job) -> None:
        """A request arrives; it waits for the next iteration boundary."""
        job.state = WAITING
        self.waiting.append(job)
        self.stats.requests += 1

    def plan(self, now: float) -> float | None:
        """Start the next step at `now`; its end time, or None when there is nothing to run."""
        if self.unified:
            self._make_room()
        budget = self.profile.max_batch_tokens
        unlimited = budget is None
        room = 0 if budget is None else budget - self.n_decode
        chunks: list[tuple[Job, int]] = []
        for job in self.prefilling:
            if not unlimited and room <= 0:
                break
            room -= self._schedule(job, room, unlimited, chunks)
        while (
            self.waiting
            and len(self.running) < self.profile.max_seqs
            and (unlimited or room > 0)
            and self.waiting[0] is not self._blocked
            and self._admit(self.waiting[0])
        ):
            job = self.waiting.popleft()
            room -= self._schedule(job, room, unlimited, chunks)
        if not chunks and not self.n_decode:
            return None
        if chunks:
            tokens = sum(take for _, take in chunks)
            pairs = sum(prefill_pairs(job.computed, take) for job, take in chunks)
            duration = self.profile.iteration_time(tokens, pairs, self.n_decode, self.context_sum)
            iterations = 1
        else:
            iterations = self._decode_run_length()
            duration = self._decode_time(iterations)
        self.step = _Step(now, duration, chunks, iterations, self.n_decode, self.context_sum)
        self.version += 1
        return now + duration

    def interrupt(self, now: float) -> float | None:
        """Cut a multi-iteration decode step at the iteration boundary after `now` (a request
        arrived); the new end time, or None when the step is not shortened."""
        step = self.step
        if step is None or step.iterations <= 1:
            return None
        done = self._iterations_within(now - step.start)
        keep = min(step.iterations, done + 1)
        if keep >= step.iterations:
            return None
        step.iterations = keep
        step.duration = self._decode_time(keep)
        self.version += 1
        return step.start + step.duration

    def finish_step(self) -> list[Job]:
        """Apply the step in flight (at its end); returns the requests it finished."""
        step = self.step
        assert step is not None
        self.step = None
        end = step.start + step.duration
        stats = self.stats
        stats.busy_s += step.duration
        stats.iterations += step.iterations
        finished: list[Job] = []
        started: list[Job] = []
        for job, take in step.chunks:
            job.computed += take
            stats.prefill_tokens += take
            if job.computed == job.admitted_len:
                self.prefilling.remove(job)
                job.generated += 1
                job.own += 1
                self.own_tokens += 1 if self.unified else 0
                stats.decode_tokens += 1
                if not job.first_token_at:
                    job.first_token_at = end
                (finished if job.generated >= job.output_len else started).append(job)
        if step.n_decode:
            k = step.iterations
            self.counter += k
            self.context_sum += step.n_decode * k
            if self.unified:
                self.own_tokens += step.n_decode * k
            stats.decode_tokens += step.n_decode * k
            heap = self._heap
            while heap and heap[0][0] <= self.counter:
                at, _, job = heapq.heappop(heap)
                if job.state == DECODE and job.finish_at == at:
                    self._leave_decode(job)
                    finished.append(job)
        for job in started:
            self._join_decode(job)
        for job in finished:
            job.finished_at = end
            self._complete(job)
        if self.unified:
            self._evict_to_fit()
        return finished

    # -- admission, cache and memory -------------------------------------------------------------

    def _nonevictable(self) -> int:
        return self.pinned.size * self.block + self.own_tokens

    def _admit(self, job: Job) -> bool:
        length = job.prompt_len + job.generated
        full = min(length // self.block, len(job.blocks))
        path = tuple(job.blocks[:full])
        matched = self.cache.match(path, touch=True)
        if matched * self.block >= length:
            matched = (length - 1) // self.block
        if self.unified:
            newly_pinned = matched - self.pinned.match(path[:matched], touch=False)
            need = length - matched * self.block + newly_pinned * self.block
            growth = self.n_decode + len(self.prefilling) + 1
            if need + growth > self.capacity - self._nonevictable():
                if not self.running:
                    raise RuntimeError(
                        f"a request of {length} tokens does not fit a KV capacity of "
                        f"{self.capacity} tokens"
                    )
                self._blocked = job  # retried only once memory is released
                return False
            if matched:
                self._pin(path[:matched])
        job.pinned = matched if self.unified else 0
        job.computed = matched * self.block
        job.admitted_len = length
        job.own = length - job.computed
        if self.unified:
            self.own_tokens += job.own
        if job.first_admission:
            job.first_admission = False
            job.cached_tokens = job.computed
            self.stats.prompt_tokens += length
            self.stats.cached_tokens += job.computed
        job.state = PREFILL
        self.prefilling.append(job)
        self.running.append(job)
        if self.unified:
            self._evict_to_fit()
        return True

    def _release(self, job: Job, kv_tokens: int) -> None:
        """Cache the request's computed full blocks and drop its pins and own KV."""
        full = min(kv_tokens // self.block, len(job.blocks))
        path = tuple(job.blocks[:full])
        if not self.unified:
            if not self.caching:
                return
            before = self.cache.size
            added = self.cache.insert(path)
            self.stats.evicted_tokens += (before + added - self.cache.size) * self.block
            return
        if full > job.pinned:
            self.cache.insert(path)
        if job.pinned:
            self._unpin(path[: job.pinned])
            self.pinned.evict(self.pinned.size)  # keep only what is still pinned
        self._blocked = None
        self.own_tokens -= job.own
        job.own = 0
        job.pinned = 0

    def _schedule(self, job: Job, room: int, unlimited: bool, chunks: list[tuple[Job, int]]) -> int:
        """Give `job` its next prefill chunk (what is left of its prompt, within `room` tokens
        unless `unlimited`); returns the tokens it takes."""
        left = job.admitted_len - job.computed
        take = left if unlimited else min(left, room)
        chunks.append((job, take))
        self._cache_scheduled(job, take)
        return take

    def _pin(self, path: tuple[int, ...]) -> None:
        """One more running request uses `path` (resident in the cache): protect it."""
        self.cache.pin(path)
        self.pinned.insert(path)
        self.pinned.pin(path)

    def _unpin(self, path: tuple[int, ...]) -> None:
        """A running request no longer uses `path` (the pinned tree keeps the node until the
        caller evicts what is unpinned)."""
        self.cache.unpin(path)
        self.pinned.unpin(path)

    def _cache_scheduled(self, job: Job, take: int) -> None:
        """Unified memory: the prompt blocks the chunk of `take` tokens fills join the cache now,
        pinned by `job`, and leave its own KV (see the module docstring)."""
        if not self.unified:
            return
        full = min((job.computed + take) // self.block, len(job.blocks))
        if full <= job.pinned:
            return
        path = tuple(job.blocks[:full])
        self.cache.insert(path)
        self._pin(path)
        if job.pinned:
            self._unpin(path[: job.pinned])
        moved = (full - job.pinned) * self.block
        job.own -= moved
        self.own_tokens -= moved
        job.pinned = full

    def _complete(self, job: Job) -> None:
        self._release(job, job.prompt_len + job.output_len - 1)
        self.running.remove(job)
        job.state = DONE

    def _preempt(self, job: Job) -> None:
        if job.state == DECODE:
            self._leave_decode(job)
            kv_tokens = job.prompt_len + job.generated - 1
        else:
            self.prefilling.remove(job)
            kv_tokens = job.computed
        self._release(job, kv_tokens)
        self.running.remove(job)
        job.state = WAITING
        self.waiting.appendleft(job)
        self.stats.preemptions += 1

    def _make_room(self) -> None:
        """Preempt the most recently admitted requests until the next iteration's KV fits."""
        while self.running:
            growth = self.n_decode + len(self.prefilling)
            if self._nonevictable() + growth <= self.capacity:
                return
            if len(self.running) == 1:
                raise RuntimeError(
                    f"one request no longer fits a KV capacity of {self.capacity} tokens"
                )
            self._preempt(self.running[-1])

    def _evict_to_fit(self) -> None:
        excess = self.cache.size * self.block + self.own_tokens - self.capacity
        if excess > 0:
            freed = self.cache.evict(-(-excess // self.block))
            self.stats.evicted_tokens += freed * self.block

    # -- decode bookkeeping ------------------------------------------------------------------------

    def _join_decode(self, job: Job) -> None:
        job.state = DECODE
        job.decode_start = self.counter
        job.gen_base = job.generated
        job.finish_at = self.counter + job.output_len - job.generated
        self._serial += 1
        heapq.heappush(self._heap, (job.finish_at, self._serial, job))
        self.n_decode += 1
        self.context_sum += job.prompt_len + job.generated

    def _leave_decode(self, job: Job) -> None:
        progress = self.counter - job.decode_start
        job.generated = job.gen_base + progress
        job.own += progress
        self.n_decode -= 1
        self.context_sum -= job.prompt_len + job.generated

    def _decode_run_length(self) -> int:
        """Iterations until the next request finishes or, with unified memory, KV runs out."""
        heap = self._heap
        while heap[0][2].state != DECODE or heap[0][2].finish_at != heap[0][0]:
            heapq.heappop(heap)
        k = heap[0][0] - self.counter
        if self.unified:
            k = min(k, (self.capacity - self._nonevictable()) // self.n_decode)
        return max(1, k)

    def _decode_time(self, k: int) -> float:
        """Exact time of k decode iterations of the current batch (contexts grow each one)."""
        p = self.profile
        n = self.n_decode
        per = p.t_fixed_s + p.c_decode_seq_s * n
        return k * per + p.c_kv_read_s * (k * self.context_sum + n * k * (k - 1) / 2)

    def _iterations_within(self, elapsed: float) -> int:
        """Whole decode iterations of the current batch completed `elapsed` seconds in."""
        p = self.profile
        n = self.n_decode
        a = p.c_kv_read_s * n / 2
        b = p.t_fixed_s + p.c_decode_seq_s * n + p.c_kv_read_s * (self.context_sum - n / 2)
        if a > 0:
            j = int((-b + math.sqrt(b * b + 4 * a * max(0.0, elapsed))) / (2 * a))
        else:
            j = int(max(0.0, elapsed) / b)
        while self._decode_time(j + 1) <= elapsed:
            j += 1
        while j > 0 and self._decode_time(j) > elapsed:
            j -= 1
        return j
