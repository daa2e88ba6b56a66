"""`EngineServerManager`: verl's LLM server-manager interface over one of agent-rl's engines.

verl's agent loops call `server_manager.generate(request_id, prompt_ids=..., sampling_params=...)`
and get verl's `TokenOutput`. This class answers those calls with an agent-rl `Engine` — in
practice `HFEngine` — so `UniAgentLoop` (or any verl agent loop) runs on a CPU without Ray or
vLLM: for development, for tests, and to check a harness before a cluster run.

It follows verl's vLLM server: `max_tokens` (or `max_new_tokens`) defaults to the configured
response length and is capped by the model's context; `logprobs` asks for one logprob per token;
`stop_reason` is `completed` or `aborted`; `extra_fields` carries `global_steps` (the engine's
policy version) and the call's `min_global_steps`/`max_global_steps`.
"""

from __future__ import annotations

from typing import Any

from uni_agent_core.inference.types import FinishReason, GenerateRequest


class EngineServerManager:
    """verl's server-manager `generate` over an agent-rl `Engine`."""

    def __init__(self, engine: Any, *, response_length: int, max_model_len: int) -> None:
        """Args:
        engine: an agent-rl `Engine` (e.g. `HFEngine`).
        response_length: default `max_tokens` of a call (verl's `rollout.response_length`).
        max_model_len: context window; a call never generates past it.
        """
        self.engine = engine
        self.response_length = response_length
        self.max_model_len = max_model_len

    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        **_: Any,
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"prompt of {len(prompt_ids)} tokens leaves no room to generate within the "
                f"model's context of {self.max_model_len}"
            )
        max_tokens = params.pop("max_tokens", params.pop("max_new_tokens", self.response_length))
        top_k = int(params.get("top_k", -1))
        request = GenerateRequest(
            prompt_ids=[int(t) for t in prompt_ids],
            max_new_tokens=max(1, min(int(max_tokens), room)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=top_k if top_k > 0 else -1,
            stop_token_ids=[int(t) for t in params.get("stop_token_ids") or []],
            ignore_eos=bool(params.get("ignore_eos", False)),
            seed=params.get("seed"),
            session_id=str(request_id),
        )
        output = await self.engine.generate(request)
        version = int(self.engine.stats().policy_version)
        versions = output.policy_version or [version]
        return TokenOutput(
            token_ids=list(output.token_ids),
            log_probs=list(output.logprobs) if params.get("logprobs") else None,
            stop_reason="aborted" if output.finish_reason == FinishReason.ABORT else "completed",
            extra_fields={
                "global_steps": version,
                "min_global_steps": min(versions),
                "max_global_steps": max(versions),
                "num_cached_tokens": output.cached_prefix_tokens,
            },
        )
