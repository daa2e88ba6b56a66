"""The engine contract: request/response records, the `Engine` protocol and `EngineDefaults`.

Every inference backend (the in-process `HFEngine`, `OpenAIServerEngine` for vLLM/SGLang
servers) speaks token ids in, token ids + logprobs out. Nothing here ever decodes and
re-tokenizes what a model sampled: that is what keeps rollouts exact to the token.

Besides generation and the weight/pause lifecycle, the protocol names the capabilities the
gateway, the router and the builder read from an engine (tokenizer, context window, streaming,
session end, server stats). `EngineDefaults` gives every one of them its "not supported" value,
so an engine class inherits it and overrides only what it really has.
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import AsyncIterator
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from uni_agent_core.errors import AgentRLError

PauseMode = Literal["keep", "abort"]
"""`keep`: in-flight requests wait and continue after `resume()`; `abort`: they end now with
finish reason `abort` (and whatever tokens the engine can return)."""


def _integer_array(value: array) -> array:
    if value.typecode not in "bBhHiIlLqQ":
        raise ValueError(f"token ids must be integers, got an array of typecode {value.typecode!r}")
    return value


TokenIds = list[int] | Annotated[array, AfterValidator(_integer_array)]
"""Token ids: a list, or a compact integer `array` (4 bytes a token instead of ~36 in a list
of Python ints). Read them as a sequence; copy with `list(...)` where a list is needed."""


class EngineClosedError(AgentRLError, RuntimeError):
    """The engine was closed; it accepts no more requests."""


class FinishReason(StrEnum):
    """Why a generation ended."""

    STOP = "stop"
    """A stop token (EOS or one of `stop_token_ids`) was sampled; it is part of the output."""
    LENGTH = "length"
    """`max_new_tokens` or the model's context window was reached."""
    ABORT = "abort"
    """The engine aborted the request (`pause(mode="abort")`, shutdown); output is partial."""


class GenerateRequest(BaseModel):
    """One generation call: a token-id prompt and its sampling parameters."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    prompt_ids: TokenIds = Field(min_length=1)
    """Token ids of the full prompt, exactly as the trainer will see them. The gateway sends an
    `array` (a thousand in-flight 30K-token prompts are 120 MB that way, 1 GB as lists)."""
    max_new_tokens: int = Field(default=256, ge=1)
    """Upper bound on sampled tokens; the output may be shorter (stop) or cut by the context."""
    temperature: float = Field(default=1.0, ge=0.0)
    """0 means greedy decoding. Logprobs are reported at this temperature (1.0 when greedy)."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass; 1.0 disables it."""
    top_k: int = Field(default=-1)
    """Keep only the k most likely tokens; -1 (or 0) disables it."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Extra token ids that end generation, in addition to the model's EOS ids."""
    ignore_eos: bool = False
    """Do not stop on the model's EOS ids (only on `stop_token_ids` and length)."""
    seed: int | None = None
    """Seed of this request's sampler; equal seeds and prompts give equal samples on one engine."""
    session_id: str | None = None
    """Routing key: calls of one agent session go to one replica for prefix-cache reuse."""
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    """Unique id of this call (logging, abort)."""

    @model_validator(mode="after")
    def _check_top_k(self) -> GenerateRequest:
        if self.top_k < -1:
            raise ValueError("top_k must be -1 (disabled), 0 (disabled) or a positive integer")
        return self


class TokenOutput(BaseModel):
    """What an engine returns for one `GenerateRequest`."""

    model_config = ConfigDict(extra="forbid")

    request_id: str
    token_ids: list[int]
    """Sampled token ids, verbatim, including the stop token when finish_reason is `stop`."""
    logprobs: list[float]
    """Log-probability of each sampled token under the policy that sampled it (one per token)."""
    finish_reason: FinishReason
    policy_version: list[int]
    """Weight version that produced each token. A partial rollout resumed after a weight
    update mixes versions."""
    cached_prefix_tokens: int = 0
    """Prompt tokens served from the prefix cache instead of being recomputed."""
    prompt_tokens: int = 0
    """Length of the prompt the engine saw."""
    replica: str | None = None
    """The replica that served it, set by a `Router` (None from a single engine)."""

    @classmethod
    def aborted(cls, request: GenerateRequest) -> TokenOutput:
        """The output of a request that ended before sampling anything (`abort`)."""
        return cls(
            request_id=request.request_id,
            token_ids=[],
            logprobs=[],
            finish_reason=FinishReason.ABORT,
            policy_version=[],
            prompt_tokens=len(request.prompt_ids),
        )

    @model_validator(mode="after")
    def _check_alignment(self) -> TokenOutput:
        n = len(self.token_ids)
        if len(self.logprobs) != n or len(self.policy_version) != n:
            raise ValueError(
                f"misaligned engine output: {n} tokens, {len(self.logprobs)} logprobs, "
                f"{len(self.policy_version)} versions"
            )
        return self


class EngineStats(BaseModel):
    """A snapshot of an engine's load, used by the router and by metrics."""

    model_config = ConfigDict(extra="forbid")

    running_requests: int = 0
    waiting_requests: int = 0
    queued_tokens: int = 0
    """Prompt tokens still to prefill plus tokens still to decode (upper bound) of queued work."""
    free_kv_tokens: int | None = None
    """KV-cache tokens that can still be admitted, when the engine knows it."""
    kv_capacity_tokens: int | None = None
    """Tokens the engine's reusable prefix cache holds in all, when it knows it: a vLLM or SGLang
    server's whole KV cache (its free blocks are the cache), an HF engine's prefix cache (its
    running sequences' KV is apart). A router sizes its model of what the replica caches by it,
    unless the recipe sets the capacity."""
    cached_prefixes: int = 0
    cached_prefix_tokens: int = 0
    prefix_cache_hits: int = 0
    prefix_cache_lookups: int = 0
    policy_version: int = 0
    paused: bool = False
    extra: dict[str, Any] = Field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    """What every inference backend provides (docs/architecture.md, "Engine")."""

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        """Sample a continuation of `request.prompt_ids`."""
        ...

    async def update_weights(self, state: Any, version: int) -> None:
        """Load new policy weights; tokens sampled afterwards carry `version`."""
        ...

    async def pause(self, mode: PauseMode = "keep") -> None:
        """Stop admitting and sampling; see `PauseMode` for what happens to in-flight work."""
        ...

    async def resume(self) -> None:
        """Continue paused requests (re-prefilled on the current weights)."""
        ...

    def stats(self) -> EngineStats:
        """Current load and cache figures."""
        ...

    async def close(self) -> None:
        """Release resources; pending requests finish with `abort`."""
        ...

    @property
    def tokenizer(self) -> Any:
        """The policy's tokenizer when the engine holds one (HF engines), else None. The
        builder (`rollout/build.py`) takes it instead of loading the policy's again."""
        ...

    @property
    def max_model_len(self) -> int | None:
        """The context window in tokens (prompt and sample), or None when unknown. The gateway
        caps a session's chains at it (`GatewaySession.capacity`)."""
        ...

    @property
    def streams(self) -> bool:
        """Whether `generate_stream` hands out tokens as they are sampled. The gateway streams
        a reply through it only when True; otherwise it calls `generate` and sends the whole
        reply as one delta."""
        ...

    def generate_stream(self, request: GenerateRequest) -> AsyncIterator[list[int] | TokenOutput]:
        """Like `generate`, but an async iterator: lists of token ids as they are sampled, then
        the final `TokenOutput` (whose `token_ids` are the concatenation of the lists). Used by
        the gateway for streamed replies when `streams` is True."""
        ...

    def end_session(self, session_id: str) -> None:
        """The agent session `session_id` is over (the gateway calls this when a session is
        finalized, deleted or expires): a routing engine stops counting its context toward load
        control. Engines that keep no per-session state do nothing."""
        ...

    async def refresh_server_stats(self) -> int | None:
        """Refresh load figures from a remote server so that `stats()` reports them; the router
        calls it before each health probe. Returns the free KV-cache tokens when known, else
        None. In-process engines have nothing to refresh and return None."""
        ...


class _Generates(Protocol):
    async def generate(self, request: GenerateRequest) -> TokenOutput: ...


class EngineDefaults:
    """The optional part of `Engine` for an engine that lacks it: no tokenizer, no known
    context window, no streaming (`generate_stream` yields the one `generate` output), no
    per-session state and no remote stats. Engine classes inherit it and override what they
    really have, so that every engine provides every member of the protocol."""

    tokenizer: Any = None
    max_model_len: int | None = None
    streams: bool = False

    async def generate_stream(
        self: _Generates, request: GenerateRequest
    ) -> AsyncIterator[list[int] | TokenOutput]:
        """No tokens as they are sampled: only the final output of `generate`."""
        yield await self.generate(request)

    def end_session(self, session_id: str) -> None:
        """Nothing to forget: the engine keeps no per-session state."""
        return None

    async def refresh_server_stats(self) -> int | None:
        """Nothing to refresh: the engine's `stats()` are always current."""
        return None
