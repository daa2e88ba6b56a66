"""The gateway section: the OpenAI/Anthropic-compatible front that records exact token trajectories.

Sampling parameters live here, once, so the trainer's logprobs and the engine's samples always come
from the same distribution whatever a harness puts in its requests.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from uni_agent_core.config.base import ConfigModel, Duration


class SamplingConfig(ConfigModel):
    """Sampling parameters of every rollout request."""

    temperature: float = Field(default=1.0, ge=0.0)
    """Softmax temperature; RL needs 1.0 so sampled-token logprobs match the trainer's."""
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    """Nucleus sampling mass; 1.0 disables it (anything lower biases the policy gradient)."""
    top_k: int = -1
    """Keep only the k most likely tokens; -1 disables it."""
    max_tokens: int | None = Field(default=None, ge=1)
    """Most tokens sampled per call; None allows whatever context is left."""

    @field_validator("top_k")
    @classmethod
    def _check_top_k(cls, value: int) -> int:
        if value == 0 or value < -1:
            raise ValueError("top_k must be -1 (disabled) or a positive integer")
        return value


class GatewayConfig(ConfigModel):
    """The HTTP gateway that harnesses talk to (`agent-rl gateway serve`)."""

    host: str = "127.0.0.1"
    """Interface to bind; keep loopback unless sandboxes on other hosts must reach it."""
    port: int = Field(default=0, ge=0, le=65_535)
    """TCP port; 0 picks a free port and publishes it to the harnesses."""
    session_ttl_s: Duration = 3600.0
    """Idle seconds (at most a day) after which a session that was never finalized is
    dropped."""
    max_sessions: int = Field(default=1024, ge=1)
    """Most live sessions; creating one more is refused with 429."""
    max_total_tokens: int | None = Field(default=None, ge=1)
    """Per-session cap on prompt + response tokens of the latest call; None uses
    `trainer.max_context_tokens`."""
    enable_rollback: bool = True
    """Treat a request that rewrites only the latest assistant turn as a rollback of that chain
    (the rewrite becomes context) instead of opening a new chain."""
    tool_parser: Literal["hermes", "xml"] = "hermes"
    """Parser of tool calls in sampled text: `hermes` (`<tool_call>{json}</tool_call>`, Qwen2.5/3)
    or `xml` (`<function=...><parameter=...>`, Qwen3-Coder/Qwen3.5); must match the chat
    template."""
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    """Sampling parameters applied to every request."""
    sampling_override: Literal["ignore", "reject", "allow"] = "ignore"
    """What to do when a request carries different sampling parameters: `ignore` them (and count
    it), `reject` the request with a 400, or `allow` them (rollouts become off-policy)."""
