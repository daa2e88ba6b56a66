"""`HFEngine`: an in-process, asynchronous, batching engine over a `transformers` causal LM.

What it does per scheduler step (one call into the process-wide compute thread, see
`compute_thread.py`, so the event loop never blocks on torch):

1. drop rows whose callers went away (cancelled requests);
2. admit waiting requests up to `max_batch_size`: each is prefilled alone, reusing the longest
   cached prefix of its prompt from the `PrefixCache`, and samples its first token;
3. decode one token for every running row in one batched forward pass over a left-padded
   `KVBatch` (which appends the new KV column in place);
4. finish rows that sampled a stop token or ran out of budget, storing their KV in the prefix
   cache, and resolve their futures.

Every sampled token carries its logprob and the weight version that produced it; the logits
are float32 whatever the model's dtype, computed as the trainer computes them
(`models/lm_head.py`). `pause()`
stops at a step boundary; `update_weights()` pauses, swaps the weights, clears the (now stale)
prefix cache and re-queues in-flight rows, which are re-prefilled on the new weights with the
tokens generated so far (a partial rollout whose tokens mix versions) once the engine resumes.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Iterable, Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

import torch

from uni_agent_core.errors import AgentRLError
from uni_agent_core.host_memory import keep_freed_memory_for_reuse
from uni_agent_core.inference.compute_thread import compute_executor
from uni_agent_core.inference.kv_batch import KVBatch
from uni_agent_core.inference.packed_weights import pack_linear_weights
from uni_agent_core.inference.prefix_cache import KV, PrefixCache
from uni_agent_core.inference.sampling import SamplingParams, sample_tokens
from uni_agent_core.inference.sequence import GenerationSequence
from uni_agent_core.inference.types import (
    EngineClosedError,
    EngineDefaults,
    EngineStats,
    FinishReason,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)
from uni_agent_core.inference.weights import load_weights
from uni_agent_core.models.attention import use_grouped_query_attention
from uni_agent_core.models.lm_head import head_logits

logger = logging.getLogger(__name__)


class EngineStepError(AgentRLError, RuntimeError):
    """The model failed during a step; every request in that step fails with this error."""


def _eos_ids_of(model: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, (list, tuple)):
            ids.update(int(i) for i in eos)
    return frozenset(ids)


def _kv_of(cache: Any) -> KV:
    return [(layer.keys, layer.values) for layer in cache.layers]


class HFEngine(EngineDefaults):
    """Batched in-process generation with KV and prefix caching, logprobs and weight versions.

    Args:
        model: a `transformers` causal LM (eval mode is set here).
        tokenizer: optional; `engine.tokenizer`, which the builder uses instead of loading the
            policy's tokenizer again.
        eos_token_ids: ids that end generation; defaults to the model's configured EOS ids.
        max_batch_size: rows decoded together; further requests wait.
        prefix_cache_tokens: capacity of the prefix cache in tokens (0 disables it).
        max_model_len: context window; defaults to `config.max_position_embeddings`.
        policy_version: version stamped on tokens until the first `update_weights`.
        executor: where model compute runs; defaults to the process-wide compute thread
            (see `compute_thread.py` for why there is one).
    """

    streams = True
    """`generate_stream` hands out each decode step's tokens as they are sampled."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        eos_token_ids: Iterable[int] | None = None,
        max_batch_size: int = 32,
        prefix_cache_tokens: int = 65536,
        max_model_len: int | None = None,
        policy_version: int = 0,
        executor: Executor | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.model = use_grouped_query_attention(model.eval())
        pack_linear_weights(self.model)  # bf16 on a CPU: oneDNN layout once (packed_weights.py)
        self._decoder = model.base_model
        self._head = model.get_output_embeddings()
        self.device = next(model.parameters()).device
        if self.device.type == "cpu":
            keep_freed_memory_for_reuse()  # no page faults per large tensor (host_memory.py)
        self.tokenizer = tokenizer
        self.eos_token_ids = (
            frozenset(eos_token_ids) if eos_token_ids is not None else _eos_ids_of(model)
        )
        self.max_batch_size = max_batch_size
        self.max_model_len: int = max_model_len or int(
            getattr(model.config, "max_position_embeddings", 32768)
        )
        self.prefix_cache = PrefixCache(prefix_cache_tokens) if prefix_cache_tokens > 0 else None
        self.policy_version = policy_version
        self._waiting: collections.deque[GenerationSequence] = collections.deque()
        self._running: list[GenerationSequence] = []
        self._batch = KVBatch()
        self._executor = executor or compute_executor()
        self._paused = False
        self._closed = False
        self._wake: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self.steps = 0
        self.generated_tokens = 0

    @classmethod
    def from_policy(
        cls, name: str, *, dtype: str = "float32", device: str = "cpu", **kwargs: Any
    ) -> HFEngine:
        """Load a policy by name (`tiny`, `smollm2-135m`, `hf:<dir>`) and wrap it."""
        from uni_agent_core.models import load_policy

        model, tokenizer = load_policy(name, dtype=dtype, device=device)
        return cls(model, tokenizer, **kwargs)

    # -- public API -------------------------------------------------------------------------

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Sample a continuation of `request.prompt_ids` (see `GenerateRequest`)."""
        return await self._submit(request, listener=None)

    async def generate_stream(
        self, request: GenerateRequest
    ) -> AsyncIterator[list[int] | TokenOutput]:
        """Like `generate`, but yields each step's new token ids as they are sampled, then the
        final `TokenOutput` (whose `token_ids` are the concatenation of the yielded lists)."""
        listener: asyncio.Queue[list[int] | None] = asyncio.Queue()
        task = asyncio.ensure_future(self._submit(request, listener=listener))
        try:
            while (chunk := await listener.get()) is not None:
                yield chunk
            yield await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait([task])

    async def _submit(
        self, request: GenerateRequest, listener: asyncio.Queue[list[int] | None] | None
    ) -> TokenOutput:
        self._ensure_started()
        if self._closed:
            raise EngineClosedError("HFEngine is closed")
        prompt_len = len(request.prompt_ids)
        if prompt_len >= self.max_model_len:
            raise ValueError(
                f"prompt of {prompt_len} tokens does not fit the context window of "
                f"{self.max_model_len} tokens (max_model_len); shorten the prompt"
            )
        generator = None
        if request.seed is not None:
            generator = torch.Generator().manual_seed(request.seed)
        stop_ids = frozenset(request.stop_token_ids)
        if not request.ignore_eos:
            stop_ids |= self.eos_token_ids
        seq = GenerationSequence(
            request=request,
            future=asyncio.get_running_loop().create_future(),
            sampling=SamplingParams(request.temperature, request.top_p, request.top_k),
            generator=generator,
            stop_ids=stop_ids,
            max_total=min(self.max_model_len, prompt_len + request.max_new_tokens),
            listener=listener,
        )
        self._waiting.append(seq)
        assert self._wake is not None
        self._wake.set()
        try:
            return await seq.future
        except asyncio.CancelledError:
            seq.cancelled = True
            if seq in self._waiting:
                self._waiting.remove(seq)
            raise

    async def pause(self, mode: PauseMode = "keep") -> None:
        """Stop at the next step boundary.

        Args:
            mode: `keep` holds in-flight requests (they continue after `resume`, re-prefilled
                if the weights changed); `abort` finishes them now with finish reason `abort`
                and the tokens generated so far.
        """
        self._ensure_started()
        self._paused = True
        assert self._idle is not None
        await self._idle.wait()
        if mode == "abort":
            for seq in [*self._running, *self._waiting]:
                seq.finish_reason = FinishReason.ABORT
                self._resolve(seq)
            self._running, self._waiting = [], collections.deque()
            self._batch = KVBatch()

    async def resume(self) -> None:
        """Continue after `pause`."""
        self._ensure_started()
        self._paused = False
        assert self._wake is not None
        self._wake.set()

    async def update_weights(
        self, state: Mapping[str, torch.Tensor] | str | Path | None, version: int
    ) -> None:
        """Load new weights between steps; later tokens carry `version`.

        Args:
            state: a state dict (names as in `model.state_dict()`), or a directory / file of
                safetensors written by `save_pretrained`; None when the engine serves a module
                someone else updated in place (the trainer's own model, lent for rollouts):
                only the version changes and caches computed with the old weights are dropped.
            version: the new policy version.
        """
        self._ensure_started()
        was_paused = self._paused
        await self.pause()
        if state is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._executor, load_weights, self.model, state)
        self.policy_version = version
        if self.prefix_cache is not None:
            self.prefix_cache.clear()
        # KV of in-flight rows came from the old weights: recompute it on resume.
        self._waiting.extendleft(reversed(self._running))
        self._running = []
        self._batch = KVBatch()
        if not was_paused:
            await self.resume()

    def stats(self) -> EngineStats:
        """Load and cache figures (safe to call at any time)."""
        queued = sum(len(s.request.prompt_ids) + s.request.max_new_tokens for s in self._waiting)
        queued += sum(s.max_total - len(s.all_ids) for s in self._running)
        cache = self.prefix_cache
        return EngineStats(
            running_requests=len(self._running),
            waiting_requests=len(self._waiting),
            queued_tokens=queued,
            kv_capacity_tokens=None if cache is None else cache.capacity_tokens,
            cached_prefixes=len(cache) if cache else 0,
            cached_prefix_tokens=cache.stored_tokens if cache else 0,
            prefix_cache_hits=cache.hits if cache else 0,
            prefix_cache_lookups=cache.lookups if cache else 0,
            policy_version=self.policy_version,
            paused=self._paused,
            extra={"steps": self.steps, "generated_tokens": self.generated_tokens},
        )

    async def close(self) -> None:
        """Abort pending requests and stop the scheduler (the shared compute thread stays)."""
        if self._closed:
            return
        self._closed = True
        if self._idle is not None:
            await self.pause(mode="abort")
        if self._scheduler is not None:
            self._scheduler.cancel()
            await asyncio.wait([self._scheduler])  # waits without re-raising its cancellation

    # -- scheduler (event-loop side) ----------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._scheduler is not None:
            return
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._scheduler = asyncio.get_running_loop().create_task(self._schedule())

    async def _schedule(self) -> None:
        assert self._wake is not None and self._idle is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            if self._paused or not (self._waiting or self._running):
                self._wake.clear()
                continue
            admitted: list[GenerationSequence] = []
            while self._waiting and len(self._running) + len(admitted) < self.max_batch_size:
                admitted.append(self._waiting.popleft())
            self._idle.clear()
            try:
                finished = await loop.run_in_executor(self._executor, self._step, admitted)
            except Exception as exc:  # deliberate boundary: fail the step's requests, go on
                logger.exception("HFEngine step failed")
                failed = [*self._running, *admitted]
                self._running, self._batch = [], KVBatch()
                for seq in failed:
                    if not seq.future.done():
                        seq.future.set_exception(EngineStepError(f"model step failed: {exc}"))
                    seq.notify(final=True)
                finished = []
            finally:
                self._idle.set()
            for seq in self._running:
                seq.notify()
            for seq in finished:
                self._resolve(seq)

    @staticmethod
    def _resolve(seq: GenerationSequence) -> None:
        if not seq.future.done():
            seq.future.set_result(seq.to_output())
        seq.notify(final=True)

    # -- model thread ---------------------------------------------------------------------

    def _step(self, admitted: list[GenerationSequence]) -> list[GenerationSequence]:
        with torch.inference_mode():
            finished: list[GenerationSequence] = []
            if any(s.cancelled for s in self._running):
                self._remove([i for i, s in enumerate(self._running) if s.cancelled])
            new_rows: list[KV] = []
            for seq in admitted:
                if seq.cancelled:
                    continue
                kv = self._prefill(seq)
                if self._is_done(seq):
                    finished.append(seq)
                else:
                    new_rows.append(kv)
                    self._running.append(seq)
            self._batch.add(new_rows)
            if self._running:
                finished.extend(self._decode())
            self.steps += 1
            return finished

    def _prefill(self, seq: GenerationSequence) -> KV:
        from transformers import DynamicCache

        ids = seq.all_ids
        hit_len, hit_kv = 0, None
        if self.prefix_cache is not None:
            hit = self.prefix_cache.lookup(ids, max_length=len(ids) - 1)
            hit_len, hit_kv = hit.length, hit.kv
        if not seq.output_ids:
            seq.cached_prefix_tokens = hit_len
        cache = DynamicCache(ddp_cache_data=hit_kv) if hit_kv else DynamicCache()
        out = self._decoder(
            input_ids=torch.tensor([ids[hit_len:]], dtype=torch.long, device=self.device),
            past_key_values=cache,
            use_cache=True,
        )
        kv = _kv_of(out.past_key_values)
        if self.prefix_cache is not None:
            self.prefix_cache.insert(ids, kv)
        logits = self._last_logits(out.last_hidden_state)
        self._append(seq, *sample_tokens(logits, [seq.sampling], [seq.generator]))
        return kv

    def _last_logits(self, hidden_B_T_H: torch.Tensor) -> torch.Tensor:
        """Float32 logits at each row's last position (`lm_head.py`, as in the trainer)."""
        return head_logits(self._head, hidden_B_T_H[:, -1])

    def _decode(self) -> list[GenerationSequence]:
        rows = self._running
        out = self._decoder(
            input_ids=torch.tensor(
                [[s.all_ids[-1]] for s in rows], dtype=torch.long, device=self.device
            ),
            attention_mask=self._batch.attention_mask(extra=1).to(self.device),
            position_ids=self._batch.positions().to(self.device),
            past_key_values=self._batch.cache(),
            use_cache=True,
        )
        self._batch.advance()
        tokens, logprobs = sample_tokens(
            self._last_logits(out.last_hidden_state),
            [s.sampling for s in rows],
            [s.generator for s in rows],
        )
        finished, done = [], []
        for i, seq in enumerate(rows):
            self._append(seq, [tokens[i]], [logprobs[i]])
            if self._is_done(seq):
                finished.append(seq)
                done.append(i)
                if self.prefix_cache is not None:
                    self.prefix_cache.insert(seq.all_ids[:-1], self._batch.row(i))
        if done:
            self._remove(done)
        return finished

    def _remove(self, indices: list[int]) -> None:
        """Drop the running rows at `indices` (the batch may reorder the others)."""
        order = self._batch.remove(indices)
        self._running = [self._running[i] for i in order]

    def _append(self, seq: GenerationSequence, tokens: list[int], logprobs: list[float]) -> None:
        seq.output_ids.extend(tokens)
        seq.tokens.extend(tokens)
        seq.logprobs.extend(logprobs)
        seq.versions.extend([self.policy_version] * len(tokens))
        self.generated_tokens += len(tokens)

    @staticmethod
    def _is_done(seq: GenerationSequence) -> bool:
        if seq.output_ids[-1] in seq.stop_ids:
            seq.finish_reason = FinishReason.STOP
        elif len(seq.all_ids) >= seq.max_total:
            seq.finish_reason = FinishReason.LENGTH
        return seq.finish_reason is not None
