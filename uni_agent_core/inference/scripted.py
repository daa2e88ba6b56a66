"""`ScriptedEngine`: an engine that replays scripted replies — for tests and fault injection.

It "samples" `encode(reply) + EOS` for each call (logprob -0.25 per token), so the whole
gateway/harness stack runs deterministically without a model. Calls can be made to fail, to
wait on a gate, or to be slow, which is how harness and gateway tests inject faults. It is a
real `Engine` (the protocol of `types.py`), not a mock of one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uni_agent_core.inference.types import (
    EngineDefaults,
    EngineStats,
    FinishReason,
    GenerateRequest,
    PauseMode,
    TokenOutput,
)


class ScriptedEngine(EngineDefaults):
    """Replies with scripted text, by call index or by what the prompt says.

    Attributes:
        replies: call index -> reply text.
        respond: for calls not in `replies`, a function of the call index and the decoded
            prompt that returns the reply (a policy that reads its context: which
            conversation this is, what the last tool said); default `reply <i>`.
        fail: call indices that raise `RuntimeError`.
        delay: seconds every call waits.
        gate: when set, every call waits for this event.
        requests: every request received, in order.
    """

    def __init__(self, tokenizer: Any, *, version: int = 0) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
        self.replies: dict[int, str] = {}
        self.respond: Callable[[int, str], str] | None = None
        self.fail: set[int] = set()
        self.delay = 0.0
        self.version = version
        self.requests: list[GenerateRequest] = []
        self.gate: asyncio.Event | None = None

    async def generate(self, request: GenerateRequest) -> TokenOutput:
        index = len(self.requests)
        self.requests.append(request)
        if self.gate is not None:
            await self.gate.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if index in self.fail:
            raise RuntimeError(f"scripted engine failure on call {index}")
        if index in self.replies:
            text = self.replies[index]
        elif self.respond is not None:
            prompt = self.tokenizer.decode(request.prompt_ids, skip_special_tokens=False)
            text = self.respond(index, prompt)
        else:
            text = f"reply {index}"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [self.eos]
        reason = FinishReason.STOP
        if len(ids) > request.max_new_tokens:
            ids, reason = ids[: request.max_new_tokens], FinishReason.LENGTH
        return TokenOutput(
            request_id=request.request_id,
            token_ids=ids,
            logprobs=[-0.25] * len(ids),
            finish_reason=reason,
            policy_version=[self.version] * len(ids),
            prompt_tokens=len(request.prompt_ids),
        )

    async def update_weights(self, state: Any, version: int) -> None:
        self.version = version

    async def pause(self, mode: PauseMode = "keep") -> None:
        return None

    async def resume(self) -> None:
        return None

    def stats(self) -> EngineStats:
        return EngineStats(policy_version=self.version)

    async def close(self) -> None:
        return None
