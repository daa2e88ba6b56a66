"""Builders: turn a recipe's `policy` and `engine` sections into running engine replicas."""

from __future__ import annotations

import os

from uni_agent_core.config import PolicyConfig
from uni_agent_core.config.inference import (
    EngineConfig,
    HFEngineConfig,
    OpenAIServerEngineConfig,
)
from uni_agent_core.inference.types import Engine


def resolve_device(device: str) -> str:
    """Map `auto` to the best local device (cuda, then npu, then cpu)."""
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    npu = getattr(torch, "npu", None)
    if npu is not None and npu.is_available():
        return "npu"
    return "cpu"


def build_engines(policy: PolicyConfig, engine: EngineConfig, replicas: int = 1) -> list[Engine]:
    """Create the engine replicas a recipe describes.

    Returns:
        `replicas` `HFEngine`s for `type: hf` (each with its own copy of the weights, so each
        can be updated and cached independently); one `OpenAIServerEngine` per base URL for
        `type: openai_server`.

    Raises:
        ValueError: `openai_server` without `base_urls` (the verl backend registers server
            addresses at run time; outside it they must be in the recipe), or an API-key
            variable that is not set.
    """
    if isinstance(engine, HFEngineConfig):
        from uni_agent_core.inference.hf_engine import HFEngine
        from uni_agent_core.models import load_policy
        from uni_agent_core.models.precision_choice import resolve_dtype

        device = resolve_device(engine.device)
        dtype = resolve_dtype(policy.dtype, policy.name, device)
        engines: list[Engine] = []
        for _ in range(replicas):
            model, tokenizer = load_policy(
                policy.name,
                dtype=dtype,
                device=device,
                chat_template=policy.chat_template,
            )
            engines.append(
                HFEngine(
                    model,
                    tokenizer,
                    max_batch_size=engine.max_batch_size,
                    prefix_cache_tokens=engine.prefix_cache_tokens,
                    max_model_len=engine.max_model_len,
                )
            )
        return engines
    assert isinstance(engine, OpenAIServerEngineConfig)
    from uni_agent_core.inference.openai_server import OpenAIServerEngine

    if not engine.base_urls:
        raise ValueError(
            "engine.base_urls: needed to reach vLLM/SGLang servers outside the verl backend "
            "(e.g. base_urls: [http://127.0.0.1:8000])"
        )
    api_key = None
    if engine.api_key_env:
        api_key = os.environ.get(engine.api_key_env)
        if api_key is None:
            raise ValueError(
                f"engine.api_key_env: environment variable {engine.api_key_env} is not set"
            )
    return [
        OpenAIServerEngine(
            url,
            api=engine.api,
            model=engine.model,
            timeout_s=engine.timeout_s,
            connect_timeout_s=engine.connect_timeout_s,
            api_key=api_key,
            max_retries=engine.max_retries,
        )
        for url in engine.base_urls
    ]
