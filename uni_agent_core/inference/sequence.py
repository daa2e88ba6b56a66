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

    def __post_init__(self) -> None:
        self.tokens = list(self.request.prompt_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.tokens

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
