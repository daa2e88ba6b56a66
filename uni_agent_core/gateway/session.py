"""A gateway session: chat requests in, exact token chains out.

`GatewaySession.chat` runs one request in three phases:

1. *prepare* (under the session lock): select the chain (see `chain.py`), reserve it, and build
   the engine prompt on a working copy of its buffers — the chain's tokens plus an incremental
   delta (append), the buffer cut back to the action boundary plus the rewrite as context
   (rollback), or a full render (new chain);
2. *generate* (outside the lock): one engine call per sample, streamed when the engine can;
3. *commit* (under the lock): append the sampled tokens (mask 1) to the working copy and make it
   the chain's state, record the `EngineCall`, release the reservation.

A failed or cancelled generation commits nothing: the reservation is released and a chain that
was being created disappears. Closing the session (finalize, delete, server shutdown) cancels
its generations in flight, whose callers get `SessionClosedError`. A prompt that leaves no room
in its chain's capacity is refused with `ContextLengthError` before the engine is called, and a
reply never exceeds what is left of it. Samples 2..n of a request (`n > 1`) open sibling chains
from a full render, so earlier turns are trained once, in the chain that sampled them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from array import array
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from uni_agent_core.errors import AgentRLError
from uni_agent_core.gateway.calls import CallLog
from uni_agent_core.gateway.chain import (
    Chain,
    Continuation,
    OpenedBy,
    select_chain,
    token_array,
    why_new_chain,
)
from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.decoding import DecodedReply, ReplyDecoder
from uni_agent_core.gateway.hashing import HASH_SIZE, extend_hash, tools_key
from uni_agent_core.gateway.history import (
    HistoryCache,
    LoweredHistory,
    ResponseStore,
    history_hashes,
)
from uni_agent_core.gateway.metrics import GatewayMetrics
from uni_agent_core.gateway.request import (
    ChatChoice,
    ChatRequest,
    Message,
    StreamDelta,
    ToolCall,
)
from uni_agent_core.inference.types import Engine, FinishReason, GenerateRequest, TokenOutput
from uni_agent_core.types import EngineCall, ModelCall, Trajectory

DeltaSink = Callable[[StreamDelta], Awaitable[None]]
T = TypeVar("T")


class SessionClosedError(AgentRLError, RuntimeError):
    """The session was finalized or deleted; it takes no more requests (HTTP 409)."""


class RequestRejectedError(AgentRLError, ValueError):
    """The request cannot be served exactly (HTTP 400); `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class ContextLengthError(RequestRejectedError):
    """The prompt alone fills the chain's capacity (HTTP 400, each provider's own error).

    The message carries both providers' wording (OpenAI's "maximum context length is N tokens",
    Anthropic's "prompt is too long: M tokens > N maximum"), which is what clients match on.
    """

    code = "context_length_exceeded"

    def __init__(self, prompt_tokens: int, capacity: int) -> None:
        super().__init__(
            f"prompt is too long: {prompt_tokens} tokens > {capacity} maximum. This model's "
            f"maximum context length is {capacity} tokens. However, your messages resulted in "
            f"{prompt_tokens} tokens. Please reduce the length of the messages.",
            param="messages",
        )
        self.prompt_tokens, self.capacity = prompt_tokens, capacity


@dataclass(frozen=True)
class SessionSettings:
    """Per-session behaviour, from the recipe's gateway section and the create request."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None
    sampling_override: str = "ignore"
    """`ignore` | `reject` | `allow` request sampling parameters that differ from these."""
    max_total_tokens: int | None = None
    """Capacity of a chain (prompt + response tokens); None leaves it to the engine's window."""
    enable_rollback: bool = True
    seed: int | None = None
    """Base seed of the session's samplers when a request names none: call k samples with
    `seed + 1009 * k` (choice i of an n > 1 call adds i), so a session replays exactly."""


@dataclass
class _Plan:
    """A prepared generation: where its tokens go and what the engine sees.

    Nothing is written to the chain before commit: the plan holds the delta (context tokens to
    append) and, for a rollback, the index the chain is cut back to.
    """

    kind: Continuation
    chain: Chain
    is_new: bool
    history_digests: bytes
    """The request's prefix hashes, concatenated (one object, held while generating)."""
    cut: int | None = None
    dropped_trainable: int = 0
    delta: array = field(default_factory=token_array)
    """The encoded new messages, as int32 (held while generating: no int object per token)."""
    prompt: array = field(default_factory=token_array)
    """What the engine gets: a compact int32 array, never a list of Python ints."""
    started_at: float = 0.0
    """Unix time the engine call started (the trace's span start)."""
    latency_s: float = 0.0


class GatewaySession:
    """Chains and engine calls of one agent session."""

    def __init__(
        self,
        session_id: str,
        *,
        engine: Engine,
        codec: ChatCodec,
        decoder: ReplyDecoder,
        settings: SessionSettings,
        metrics: GatewayMetrics,
        run_blocking: Callable[..., Awaitable[Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.engine = engine
        self.codec = codec
        self.decoder = decoder
        self.settings = settings
        self.metrics = metrics
        self.metadata = dict(metadata or {})
        self.chains: list[Chain] = []
        self._calls = CallLog()
        self.closed = False
        self.last_used = time.monotonic()
        self._lock = asyncio.Lock()
        self._ids = itertools.count()
        self._clock = itertools.count(1)
        self._run_blocking = run_blocking
        self._generations: set[asyncio.Future[Any]] = set()
        """Generations in flight; `close()` cancels them."""
        self.history = HistoryCache()
        """The wire adapters' memo of the last lowered history (see `gateway/history.py`)."""
        self.responses = ResponseStore()
        """Stored OpenAI Responses, for requests that name a `previous_response_id`."""

    # -- public API -------------------------------------------------------------------------

    async def chat(
        self, request: ChatRequest, on_delta: DeltaSink | None = None
    ) -> list[ChatChoice]:
        """Serve one chat request: `request.n` samples, each committed to its chain.

        A history lowered from the wire (`LoweredHistory`) is released once the request is
        prepared: a generation in flight holds its prompt's tokens, not its messages.
        """
        self._check_open()
        self.last_used = time.monotonic()
        sampling = self._sampling(request)
        stop_ids = self._stop_token_ids(request)
        plans = await self._prepare(request)
        tools = request.tools
        if isinstance(request.messages, LoweredHistory):
            request.messages.release()  # the wire payload is not needed while generating
        try:
            samples = await self._generate_unless_closed(
                self._generate_all(plans, tools, sampling, stop_ids, on_delta)
            )
            # All samples are in: commit them together, so a request either records every
            # sample or (on any failure) none.
            return [await self._commit(*sample) for sample in samples]
        except BaseException:
            # A sample failed or the caller went away: release every reservation not committed.
            await asyncio.shield(self._release(plans))
            raise

    async def _generate_unless_closed(self, work: Awaitable[T]) -> T:
        """Runs `work` as a generation that `close()` can cancel.

        Raises:
            SessionClosedError: the session was closed while it ran (or before its result
                could be committed); nothing is recorded.
        """
        generation = asyncio.ensure_future(work)
        self._generations.add(generation)
        try:
            result = await generation
        except asyncio.CancelledError:
            caller = asyncio.current_task()
            if self.closed and caller is not None and not caller.cancelling():
                raise SessionClosedError(
                    f"session {self.session_id} was closed while generating; nothing was recorded"
                ) from None
            raise
        finally:
            self._generations.discard(generation)
        self._check_open()
        return result

    async def _generate_all(
        self,
        plans: list[_Plan],
        tools: list[dict[str, Any]] | None,
        sampling: dict[str, Any],
        stop_ids: list[int],
        on_delta: DeltaSink | None,
    ) -> list[tuple[int, _Plan, TokenOutput, DecodedReply]]:
        """Every sample as its own task; when one fails (or the caller goes away), the others
        are cancelled before the error propagates.

        One sample gets a task too: awaiting it directly was measured slower over HTTP (1860
        vs 2470 turns per CPU-second at 100 sessions with an instant engine), because the
        switch lets the event loop run many requests' same phases back to back.
        """
        tasks = [
            asyncio.ensure_future(self._generate(i, plan, tools, sampling, stop_ids, on_delta))
            for i, plan in enumerate(plans)
        ]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.wait(tasks)
            raise

    @property
    def calls(self) -> list[EngineCall]:
        """Every engine call so far, in order (materialised on demand)."""
        return self._calls.engine_calls()

    def model_calls(self) -> list[ModelCall]:
        """Every engine call as an episode's trace shows it, in order."""
        return self._calls.model_calls()

    def trajectories(self) -> list[Trajectory]:
        """Every chain as a `Trajectory` (chains with nothing generated yet are skipped)."""
        return [
            Trajectory(
                session_id=self.session_id,
                chain_id=c.id,
                prompt_ids=c.prompt_ids.tolist(),
                response_ids=c.response_ids.tolist(),
                loss_mask=c.labels.mask(),
                logprobs=c.labels.logprobs().tolist(),
                policy_versions=c.labels.versions().tolist(),
                finish_reason=c.finish_reason,
                num_turns=c.turns,
                metadata={
                    "closed": c.closed,
                    "rollbacks": c.rollbacks,
                    "dropped_trainable_tokens": c.dropped_trainable_tokens,
                    "opened_by": c.opened_by,
                    "rollback_marks": [{"at": at, "call": call} for at, call in c.rollback_marks],
                    **self.metadata,
                },
            )
            for c in self.chains
            if c.turns > 0 and not c.reserved
        ]

    def close(self) -> None:
        """Refuse further requests (finalize, delete, expiry), and tell a routing engine the
        session is over: its context stops counting toward the router's load control
        (`router/load_control.py`)."""
        self.closed = True
        for generation in self._generations:
            generation.cancel()
        self.engine.end_session(self.session_id)

    @property
    def capacity(self) -> int | None:
        """Most tokens a chain holds, prompt and replies: the session's `max_total_tokens`,
        and never more than the engine's context window where the engine has one."""
        window = self.engine.max_model_len
        limits = [n for n in (self.settings.max_total_tokens, window) if n is not None]
        return min(limits) if limits else None

    @property
    def busy(self) -> bool:
        """Whether a generation is in flight (such a session is never expired)."""
        return any(c.reserved for c in self.chains)

    # -- prepare ------------------------------------------------------------------------------

    async def _prepare(self, request: ChatRequest) -> list[_Plan]:
        hashes = history_hashes(request.messages)
        key = tools_key(request.tools)
        async with self._lock:
            self._check_open()
            selection = select_chain(
                self.chains, hashes, key, enable_rollback=self.settings.enable_rollback
            )
            if selection.ambiguous:
                self.metrics.ambiguous_rollbacks += 1
            digests = b"".join(hashes)
            first = self._plan_for(selection.kind, selection.chain, selection.depth, digests, key)
            if first.is_new:
                first.chain.opened_by = why_new_chain(self.chains, hashes, key, selection)
            plans = [first] + [
                self._plan_for(Continuation.NEW, None, 0, digests, key)
                for _ in range(request.n - 1)
            ]
            for sibling in plans[1:]:
                sibling.chain.opened_by = OpenedBy.SIBLING
            for plan in plans:
                plan.chain.reserved = True
                if plan.is_new:
                    self.chains.append(plan.chain)
        try:
            for plan in plans:
                await self._encode(plan, request)
        except BaseException:
            await asyncio.shield(self._release(plans))
            raise
        return plans

    def _plan_for(
        self,
        kind: Continuation,
        chain: Chain | None,
        depth: int,
        digests: bytes,
        key: bytes,
    ) -> _Plan:
        if chain is None:
            chain = Chain(id=next(self._ids), tools_key=key, digests=b"")
            return _Plan(Continuation.NEW, chain, True, digests)
        if kind is Continuation.ROLLBACK:
            cut = chain.rollback_cut
            assert cut is not None
            dropped = chain.labels.sampled - chain.labels.sampled_before(cut)
            return _Plan(kind, chain, False, digests, cut=cut, dropped_trainable=dropped)
        return _Plan(kind, chain, False, digests)

    async def count_prompt_tokens(self, request: ChatRequest) -> int:
        """How many prompt tokens `chat(request)` would send the engine now (for request.n = 1):
        the chain it would continue (its tokens, cut back for a rollback, plus the delta) or a
        full render. Reads the chains, changes nothing (no chain, memo or call is touched).

        Raises:
            RequestRejectedError: the template cannot render a message the request needs.
        """
        self._check_open()
        messages, tools = request.messages, request.tools
        selection = select_chain(
            self.chains,
            history_hashes(messages),
            tools_key(tools),
            enable_rollback=self.settings.enable_rollback,
        )
        chain = selection.chain
        if selection.kind is Continuation.NEW or chain is None:
            self._check_system_messages(messages, 1)
            return len(await self._blocking(self.codec.encode_full, messages, tools))
        if selection.kind is Continuation.APPEND:
            kept, depth, ended = len(chain.response_ids), chain.history_len, chain.ended
        else:
            assert chain.rollback_cut is not None
            kept, depth, ended = chain.rollback_cut, chain.k, True
        kept += len(chain.prompt_ids)  # read before the encoding awaits: the chain may grow
        self._check_system_messages(messages, depth)
        delta = await self._blocking(
            self.codec.encode_delta, messages[depth:], tools, previous_ended=ended
        )
        return kept + len(delta)

    def _check_system_messages(self, messages: Sequence[Message], start: int) -> None:
        """Refuse a system message after the first (from `start` on) that the template cannot
        render in place (`ChatCodec.mid_system`)."""
        if self.codec.mid_system:
            return
        for i in range(max(start, 1), len(messages)):
            if messages[i].role == "system":
                raise RequestRejectedError(
                    "this model's chat template cannot render a system message after the first "
                    f"(message {i} of the lowered conversation); put it in the system prompt",
                    param="messages",
                )

    async def _encode(self, plan: _Plan, request: ChatRequest) -> None:
        messages, tools = request.messages, request.tools
        chain = plan.chain
        if plan.kind is Continuation.NEW:
            self._check_system_messages(messages, 1)
            prompt = await self._blocking(self.codec.encode_full, messages, tools)
            chain.prompt_ids = token_array(prompt)
            plan.prompt = chain.prompt_ids[:]
            return
        depth = chain.history_len if plan.kind is Continuation.APPEND else chain.k
        ended = chain.ended if plan.kind is Continuation.APPEND else True
        self._check_system_messages(messages, depth)
        delta = await self._blocking(
            self.codec.encode_delta, messages[depth:], tools, previous_ended=ended
        )
        self._check_generation_prompt(delta)
        plan.delta = token_array(delta)
        kept = chain.response_ids if plan.cut is None else chain.response_ids[: plan.cut]
        plan.prompt = chain.prompt_ids + kept + plan.delta

    def _check_generation_prompt(self, delta: list[int]) -> None:
        gen, sep = self.codec.generation_prompt_ids, self.codec.separator_ids
        if delta[-len(gen) :] != gen or delta[-len(gen) - len(sep) : -len(gen)] != sep:
            raise RuntimeError(
                "delta does not end with separator + generation prompt; refusing to record "
                "misaligned tokens"
            )

    # -- generate and commit ------------------------------------------------------------------

    async def _generate(
        self,
        index: int,
        plan: _Plan,
        tools: list[dict[str, Any]] | None,
        sampling: dict[str, Any],
        stop_ids: list[int],
        on_delta: DeltaSink | None,
    ) -> tuple[int, _Plan, TokenOutput, DecodedReply]:
        """Sample one reply for `plan` (nothing is committed here).

        Raises:
            ContextLengthError: the prompt leaves no room in the chain's capacity.
        """
        capacity = self.capacity
        room = None if capacity is None else capacity - len(plan.prompt)
        if capacity is not None and room is not None and room <= 0:
            self.metrics.context_length_refusals += 1
            raise ContextLengthError(len(plan.prompt), capacity)
        sampling = dict(sampling)
        seed = sampling.pop("seed")
        if seed is not None:
            seed += index  # n > 1: distinct, reproducible choices
        max_new = sampling.pop("max_tokens") or room or 1 << 30
        if room is not None:
            max_new = min(max_new, room)
        # Internal, already-validated values: skip re-validating a long prompt every turn.
        engine_request = GenerateRequest.model_construct(
            prompt_ids=plan.prompt,
            max_new_tokens=max_new,
            stop_token_ids=stop_ids,
            session_id=self.session_id,
            request_id=f"{self.session_id}-{len(self._calls)}-{index}",
            ignore_eos=False,
            seed=seed,
            **sampling,
        )
        plan.started_at, started = time.time(), time.perf_counter()
        output = await self._call_engine(index, engine_request, tools, on_delta)
        plan.latency_s = time.perf_counter() - started
        self.metrics.engine_latency.observe(plan.latency_s)
        if output.finish_reason is FinishReason.ABORT:
            raise RuntimeError("the engine aborted the generation; nothing was recorded")
        reply = self.decoder.decode(output.token_ids, output.finish_reason, tools)
        return index, plan, output, reply

    async def _call_engine(
        self,
        index: int,
        engine_request: GenerateRequest,
        tools: list[dict[str, Any]] | None,
        on_delta: DeltaSink | None,
    ) -> TokenOutput:
        if on_delta is None or not self.engine.streams:
            output = await self.engine.generate(engine_request)
            if on_delta is not None:
                text = self.decoder.stream_text(output.token_ids, tools)
                if text:
                    await on_delta(StreamDelta(index=index, text=text))
            return output
        streamer = self.decoder.streamer(tools)
        final: TokenOutput | None = None
        async for item in self.engine.generate_stream(engine_request):
            if isinstance(item, TokenOutput):
                final = item
                text = streamer.finish()
            else:
                text = streamer.feed(item)
            if text:
                await on_delta(StreamDelta(index=index, text=text))
        assert final is not None
        return final

    async def _commit(
        self,
        index: int,
        plan: _Plan,
        output: TokenOutput,
        reply: DecodedReply,
    ) -> ChatChoice:
        """Write a sample into its chain and answer with the client's view of it."""
        chain = plan.chain
        async with self._lock:
            n_out = len(output.token_ids)
            # Recorded first: what can refuse (the log) refuses before the chain changes.
            start = (plan.cut if plan.cut is not None else len(chain.response_ids)) + len(
                plan.delta
            )
            call = self._calls.append(
                chain,
                len(plan.prompt),
                n_out,
                output.finish_reason,
                continuation=plan.kind,
                response_start=start,
                cached_tokens=output.cached_prefix_tokens,
                started_at=plan.started_at,
                latency_s=plan.latency_s,
                replica=output.replica,
                tool_calls=summarize_tool_calls(reply.tool_calls),
            )
            if plan.kind is Continuation.ROLLBACK:
                assert plan.cut is not None and chain.latest_call is not None
                self._calls.supersede(chain.latest_call)
                del chain.response_ids[plan.cut :]
                chain.labels.truncate(plan.cut)
                chain.rollback_marks = [m for m in chain.rollback_marks if m[0] < plan.cut]
                chain.rollback_marks.append((plan.cut, chain.latest_call))
            chain.response_ids.extend(plan.delta)
            chain.labels.add_context(len(plan.delta))
            gen_start = len(chain.response_ids)
            chain.response_ids.extend(output.token_ids)
            chain.labels.add_sampled(output.logprobs, output.policy_version)
            if plan.kind is Continuation.NEW:
                chain.rollback_cut = None
            else:
                gen_len = len(self.codec.generation_prompt_ids) + len(self.codec.separator_ids)
                chain.rollback_cut = gen_start - gen_len
            said = Message(
                role="assistant", content=reply.content, tool_calls=reply.tool_calls or None
            )
            history = plan.history_digests
            chain.digests = history + extend_hash(history[-HASH_SIZE:], said)
            chain.ended = bool(n_out) and output.token_ids[-1] == self.codec.eos_token_id
            chain.finish_reason = reply.finish_reason
            chain.updated = next(self._clock)
            if plan.kind is Continuation.ROLLBACK:
                chain.rollbacks += 1
                chain.dropped_trainable_tokens += plan.dropped_trainable
                self.metrics.rollbacks += 1
                self.metrics.rollback_dropped_tokens += plan.dropped_trainable
            else:
                chain.turns += 1
                if plan.kind is Continuation.NEW:
                    self.metrics.chains_opened += 1
                    if len(self.chains) > 1:
                        self.metrics.splits += 1
            capacity = self.capacity
            if capacity is not None and chain.total_tokens >= capacity:
                chain.closed, chain.finish_reason = True, "length"
            chain.latest_call = call
            chain.reserved = False
        self.metrics.observe_call(len(plan.prompt), output)
        return ChatChoice(
            index=index,
            content=reply.content,
            tool_calls=reply.tool_calls,
            finish_reason=reply.finish_reason,
            chain_id=chain.id,
            prompt_tokens=len(plan.prompt),
            completion_tokens=len(output.token_ids),
            cached_tokens=output.cached_prefix_tokens,
            parse_error=reply.parse_error,
        )

    async def _release(self, plans: list[_Plan]) -> None:
        async with self._lock:
            for plan in plans:
                if not plan.chain.reserved:
                    continue
                plan.chain.reserved = False
                if plan.is_new and plan.chain in self.chains:
                    self.chains.remove(plan.chain)

    # -- helpers ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self.closed:
            raise SessionClosedError(f"session {self.session_id} is finalized or deleted")

    async def _blocking(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._run_blocking is None:
            return fn(*args, **kwargs)
        return await self._run_blocking(fn, *args, **kwargs)

    def _session_seed(self) -> int | None:
        if self.settings.seed is None:
            return None
        return self.settings.seed + 1009 * len(self._calls)

    def _sampling(self, request: ChatRequest) -> dict[str, Any]:
        s, o = self.settings, request.sampling
        chosen: dict[str, Any] = {
            "temperature": s.temperature,
            "top_p": s.top_p,
            "top_k": s.top_k,
            "seed": o.seed if o.seed is not None else self._session_seed(),
            "max_tokens": o.max_tokens or s.max_tokens,
        }
        if o.max_tokens and s.max_tokens:
            chosen["max_tokens"] = min(o.max_tokens, s.max_tokens)
        for name in ("temperature", "top_p", "top_k"):
            value = getattr(o, name)
            if value is None or value == chosen[name]:
                continue
            if s.sampling_override == "reject":
                raise RequestRejectedError(
                    f"{name}={value} differs from the session's {name}={chosen[name]}; this "
                    "gateway trains on-policy and rejects sampling overrides",
                    param=name,
                )
            if s.sampling_override == "allow":
                chosen[name] = value
            else:
                self.metrics.sampling_overrides_ignored += 1
        return chosen

    def _stop_token_ids(self, request: ChatRequest) -> list[int]:
        ids = []
        for text in request.sampling.stop:
            encoded = self.codec.encode_text(text)
            if len(encoded) != 1:
                raise RequestRejectedError(
                    f"stop sequence {text!r} is {len(encoded)} tokens; only single-token stop "
                    "sequences can be honoured without cutting sampled tokens",
                    param="stop",
                )
            ids.append(encoded[0])
        return ids


TOOL_ARGUMENTS_SHOWN = 2000
"""Characters of a tool call's arguments an episode's trace keeps."""


def summarize_tool_calls(calls: list[ToolCall] | None) -> list[dict[str, str]] | None:
    """A reply's tool calls as the trace shows them: name and (clipped) arguments."""
    if not calls:
        return None
    summary = []
    for call in calls:
        arguments = call.arguments
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        summary.append({"name": call.name, "arguments": text[:TOOL_ARGUMENTS_SHOWN]})
    return summary
