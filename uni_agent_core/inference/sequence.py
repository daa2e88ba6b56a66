"""`GenerationSequence`: one request's state inside `HFEngine` (tokens, logprobs, versions)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import torch

from uni_agent_core.inference.sampling import SamplingParams
from uni_agent_core.inference.types import FinishReason, GenerateRequest, TokenOutput


@dataclass(eq=False)
class GenerationSequence:
    """A request being generated: what it sampled so far and how it is sampled."""

    request: GenerateRequest
    future: asyncio.Future[TokenOutput]
    sampling: SamplingParams
    generator: torch.Generator | None
    stop_ids: frozenset[int]
    max_total: int
    tokens: list[int] = field(default_factory=list)
    """Prompt plus output so far, grown in place (no per-step copies of a long context)."""
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    cached_prefix_tokens: int = 0
    cancelled: bool = False
    finish_reason: FinishReason | None = None
    listener: asyncio.Queue[list[int] | None] | None = None
    """Receives newly sampled tokens after every step, then None when the request ends
    (streaming callers only)."""
    streamed: int = 0
    """Output tokens already handed to the listener."""

    def __post_init__(self) -> None:
        self.tokens = list(self.request.prompt_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.tokens

    def notify(self, final: bool = False) -> None:
        """Hand tokens sampled since the last call to the listener (event-loop thread only)."""
        if self.listener is None:
            return
        if len(self.output_ids) > self.streamed:
            self.listener.put_nowait(self.output_ids[self.streamed :])
            self.streamed = len(self.output_ids)
        if final:
            self.listener.put_nowait(None)

    def to_output(self) -> TokenOutput:
        assert self.finish_reason is not None
        return TokenOutput(
            request_id=self.request.request_id,
            token_ids=list(self.output_ids),
            logprobs=list(self.logprobs),
            finish_reason=self.finish_reason,
            policy_version=list(self.versions),
            cached_prefix_tokens=self.cached_prefix_tokens,
            prompt_tokens=len(self.request.prompt_ids),
        )
