"""`VerlServerEngine`: agent-rl's `Engine` over verl's LLM server manager.

Inside verl, generation goes through the agent-loop worker's server manager
(`LLMServerClient.generate(request_id, prompt_ids=..., sampling_params=...)` -> `TokenOutput` with
`token_ids`, `log_probs`, `stop_reason` and `extra_fields["global_steps"]`). This adapter lets the
gateway drive it with our `GenerateRequest`s, token ids in and token ids out, so what the trainer
receives is exactly what verl's servers sampled:

- the routing key is the gateway session id (the request id verl's load balancer keys sticky
  routing on), so every turn of a session lands on the replica that caches its prefix;
- logprobs are required: a server that returns tokens without logprobs is an error (fail
  closed), never padded with zeros;
- verl reports `completed` for both stop and length; the finish reason is recovered from the
  tokens (a stop token at the end is `stop`, reaching `max_tokens` otherwise is `length`);
- the policy version of a call is verl's global step. A call that a partial rollout resumed
  across a weight update reports `min_global_steps`/`max_global_steps`; its first token gets the
  older version and the rest the newer, so a chain's version span stays exact.

verl's trainer owns the servers' weights, so `update_weights` refuses; `pause`/`resume` gate
admission of new calls through this adapter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from uni_agent_core.errors import AgentRLError
from uni_agent_core.inference.types import (
    EngineDefaults,
    EngineStats,
    FinishReason,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)


class VerlServerError(AgentRLError, RuntimeError):
    """verl's server returned something the token-exact record cannot accept."""


def call_versions(extra_fields: dict[str, Any], n_tokens: int, fallback: int) -> list[int]:
    """Per-token policy versions of one call from verl's global-step fields."""
    latest = extra_fields.get("max_global_steps", extra_fields.get("global_steps"))
    latest = fallback if latest is None else int(latest)
    oldest = extra_fields.get("min_global_steps")
    oldest = latest if oldest is None else int(oldest)
    versions = [latest] * n_tokens
    if versions:
        versions[0] = oldest
    return versions


class VerlServerEngine(EngineDefaults):
    """An `Engine` whose generations go to verl's rollout servers."""

    def __init__(self, server_manager: Any, *, eos_token_ids: Iterable[int]) -> None:
        """Args:
        server_manager: verl's `LLMServerClient` (or anything with its `generate` signature).
        eos_token_ids: the model's end-of-turn ids; a call ending on one finished with `stop`.
        """
        self.server_manager = server_manager
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self._admitting = asyncio.Event()
        self._admitting.set()
        self._running = 0
        self._version = 0
        self._closed = False

    def observe_version(self, version: int) -> None:
        """verl's current global step (from the sample's row): the floor of the policy
        version reported before this adapter has seen a generation (e.g. after a resume)."""
        self._version = max(self._version, int(version))

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        await self._admitting.wait()
        if self._closed:
            return TokenOutput.aborted(request)
        params: dict[str, Any] = {
            "temperature": request.temperature,
            "top_p": request.top_p,
            "top_k": request.top_k if request.top_k > 0 else -1,
            "max_tokens": request.max_new_tokens,
            "logprobs": True,
        }
        if request.seed is not None:
            params["seed"] = request.seed
        if request.stop_token_ids:
            params["stop_token_ids"] = list(request.stop_token_ids)
        if request.ignore_eos:
            params["ignore_eos"] = True
        self._running += 1
        try:
            output = await self.server_manager.generate(
                request.session_id or request.request_id,
                prompt_ids=list(request.prompt_ids),
                sampling_params=params,
            )
        finally:
            self._running -= 1
        return self._token_output(request, output)

    def _token_output(self, request: GenerateRequest, output: Any) -> TokenOutput:
        token_ids = [int(t) for t in output.token_ids]
        logprobs = output.log_probs
        if token_ids and (logprobs is None or len(logprobs) != len(token_ids)):
            raise VerlServerError(
                f"verl's server returned {len(token_ids)} tokens with "
                f"{'no' if logprobs is None else len(logprobs)} logprobs; the rollout needs one "
                "logprob per sampled token (set actor_rollout_ref.rollout.calculate_log_probs)"
            )
        extra = dict(output.extra_fields or {})
        versions = call_versions(extra, len(token_ids), self._version)
        if versions:
            self._version = max(self._version, max(versions))
        elif extra.get("global_steps") is not None:
            self._version = max(self._version, int(extra["global_steps"]))
        stops = self.eos_token_ids | set(request.stop_token_ids)
        if output.stop_reason == "aborted":
            finish = FinishReason.ABORT
        elif token_ids and token_ids[-1] in stops and not request.ignore_eos:
            finish = FinishReason.STOP
        else:
            # max_tokens, or (short of it, without a stop token) the context window was reached.
            finish = FinishReason.LENGTH
        cached = extra.get("num_cached_tokens")
        return TokenOutput(
            request_id=request.request_id,
            token_ids=token_ids,
            logprobs=[float(x) for x in (logprobs or [])],
            finish_reason=finish,
            policy_version=versions,
            cached_prefix_tokens=int(cached) if cached else 0,
            prompt_tokens=len(request.prompt_ids),
        )

    async def update_weights(self, state: Any, version: int) -> None:
        raise NotImplementedError(
            "verl's trainer owns the rollout servers' weights and syncs them itself "
            "(checkpoint engine); the agent loop never pushes weights"
        )

    async def pause(self, mode: PauseMode = "keep") -> None:
        self._admitting.clear()

    async def resume(self) -> None:
        self._admitting.set()

    def stats(self) -> EngineStats:
        return EngineStats(
            running_requests=self._running,
            policy_version=self._version,
            paused=not self._admitting.is_set(),
        )

    async def close(self) -> None:
        self._closed = True
        self._admitting.set()
