"""Gateway test fixtures: a scripted engine over the real tiny tokenizer and codec."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.decoding import ReplyDecoder
from uni_agent_core.gateway.metrics import GatewayMetrics
from uni_agent_core.gateway.session import GatewaySession, SessionSettings
from uni_agent_core.inference.types import FinishReason, GenerateRequest, TokenOutput
from uni_agent_core.models import load_policy


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return load_policy("tiny")[1]


class ScriptedEngine:
    """An engine that "samples" scripted replies: encode(reply) + EOS, logprob -0.25 each.

    `replies` maps a call index to reply text (default `reply <i>`); `fail` holds call indices
    that raise; `delay` makes every call wait (to test concurrency); `max_tokens` cuts replies
    (finish reason length, no EOS).
    """

    def __init__(self, tokenizer, *, version: int = 0) -> None:
        self.tokenizer = tokenizer
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.replies: dict[int, str] = {}
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
        text = self.replies.get(index, f"reply {index}")
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

    async def update_weights(self, state, version: int) -> None:
        self.version = version

    async def pause(self, mode: str = "keep") -> None:
        return None

    async def resume(self) -> None:
        return None

    def stats(self):
        from uni_agent_core.inference.types import EngineStats

        return EngineStats(policy_version=self.version)

    async def close(self) -> None:
        return None


@pytest.fixture
def make_session(tiny_tokenizer) -> Callable[..., tuple[GatewaySession, ScriptedEngine]]:
    codec = ChatCodec(tiny_tokenizer)

    def make(**settings) -> tuple[GatewaySession, ScriptedEngine]:
        engine = ScriptedEngine(tiny_tokenizer)
        metrics = GatewayMetrics()
        session = GatewaySession(
            "test-session",
            engine=engine,
            codec=codec,
            decoder=ReplyDecoder(tiny_tokenizer, "hermes", metrics),
            settings=SessionSettings(**settings),
            metrics=metrics,
        )
        return session, engine

    return make


@pytest.fixture(scope="session")
def scripted_engine_cls() -> type[ScriptedEngine]:
    return ScriptedEngine
