"""Gateway test fixtures: a scripted engine over the real tiny tokenizer and codec."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from uni_agent_core.gateway.codec import ChatCodec
from uni_agent_core.gateway.decoding import ReplyDecoder
from uni_agent_core.gateway.metrics import GatewayMetrics
from uni_agent_core.gateway.session import GatewaySession, SessionSettings
from uni_agent_core.inference.scripted import ScriptedEngine
from uni_agent_core.models import load_policy


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return load_policy("tiny")[1]


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
