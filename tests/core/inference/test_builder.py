"""Engine builders: recipe sections become engines with the recipe's settings."""

from __future__ import annotations

import asyncio

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.config.inference import HFEngineConfig, OpenAIServerEngineConfig
from uni_agent_core.config.model import PolicyConfig
from uni_agent_core.inference import HFEngine
from uni_agent_core.inference.builder import build_engines, resolve_device
from uni_agent_core.inference.openai_server import OpenAIServerEngine


def test_hf_engine_from_the_embedded_recipe(tmp_path) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    recipe = load_recipe("recipes/tiny-cpu.yaml")
    policy = recipe.policy.model_copy(update={"chat_template": template})
    (engine,) = build_engines(policy, recipe.engine)
    assert isinstance(engine, HFEngine)
    assert engine.max_batch_size == recipe.engine.max_batch_size
    assert engine.tokenizer.chat_template == template.read_text()
    asyncio.run(engine.close())


def test_server_engines_one_per_url(monkeypatch) -> None:
    config = OpenAIServerEngineConfig(
        base_urls=["http://127.0.0.1:9001", "http://127.0.0.1:9002"],
        model="m",
        api_key_env="AGENT_RL_TEST_KEY",
    )
    with pytest.raises(ValueError, match="AGENT_RL_TEST_KEY is not set"):
        build_engines(PolicyConfig(), config)
    monkeypatch.setenv("AGENT_RL_TEST_KEY", "secret")
    engines = build_engines(PolicyConfig(), config)
    assert [e.base_url for e in engines] == config.base_urls
    assert all(isinstance(e, OpenAIServerEngine) for e in engines)

    async def close():
        for engine in engines:
            await engine.close()

    asyncio.run(close())


def test_server_engine_without_urls_is_explained() -> None:
    with pytest.raises(ValueError, match="engine.base_urls"):
        build_engines(PolicyConfig(), OpenAIServerEngineConfig(model="m"))


def test_auto_device_on_this_machine() -> None:
    import torch

    expected = "cuda" if torch.cuda.is_available() else resolve_device("auto")
    assert resolve_device("auto") == expected
    assert resolve_device("cpu") == "cpu"
    assert HFEngineConfig().device == "auto"
