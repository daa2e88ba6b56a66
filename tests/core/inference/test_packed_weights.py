"""oneDNN-packed bf16 weights: the same results as plain bf16, following every weight change."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from uni_agent_core.inference import GenerateRequest, HFEngine
from uni_agent_core.inference.packed_weights import pack_linear_weights
from uni_agent_core.inference.packed_weights import packed_module as packed

pytestmark = pytest.mark.skipif(
    not torch.backends.mkldnn.is_available(), reason="this PyTorch build has no oneDNN"
)


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(64, 96, bias=False).to(torch.bfloat16)


def test_a_packed_layer_computes_exactly_what_the_plain_one_does() -> None:
    layer = _linear()
    plain = copy.deepcopy(layer)
    assert pack_linear_weights(layer) == 1 and packed(layer)
    for shape in ((16, 64), (3, 1, 64), (2, 40, 64)):
        x = torch.randn(*shape).to(torch.bfloat16)
        with torch.inference_mode():
            assert torch.equal(layer(x), plain(x))


def test_the_packed_copy_follows_the_weights_in_place_and_replaced() -> None:
    layer, other = _linear(0), _linear(1)
    pack_linear_weights(layer)
    x = torch.randn(16, 64).to(torch.bfloat16)
    with torch.no_grad():
        layer.load_state_dict(other.state_dict())  # copies into the parameter: its version moves
        assert torch.equal(layer(x), other(x))
        layer.weight = torch.nn.Parameter(torch.zeros_like(layer.weight))
        assert torch.equal(layer(x), torch.zeros(16, 96, dtype=torch.bfloat16))
        layer.float()  # no longer bf16: the plain kernel
        assert layer(x.float()).dtype == torch.float32


def test_a_gradient_takes_the_plain_path() -> None:
    layer = _linear()
    pack_linear_weights(layer)
    x = torch.randn(4, 64).to(torch.bfloat16).requires_grad_(True)
    layer(x).float().sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


def test_float32_and_other_devices_are_not_packed() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    assert pack_linear_weights(model) == 0
    assert not any(packed(m) for m in model)


def test_a_bf16_engine_samples_the_same_tokens_and_logprobs_packed(tiny_policy) -> None:
    model, tokenizer = tiny_policy
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    request = GenerateRequest(prompt_ids=[1, 2, 3, 4, 5], max_new_tokens=12, temperature=1, seed=4)

    async def generate(policy, pack: bool):
        engine = HFEngine(policy, tokenizer)
        if not pack:  # undo what the engine did: every layer back on the plain kernel
            for module in policy.modules():
                module.__dict__.pop("forward", None)
        try:
            return await engine.generate(request)
        finally:
            await engine.close()

    packed_out = asyncio.run(generate(bf16, pack=True))
    assert any(packed(m) for m in bf16.modules())
    plain_out = asyncio.run(generate(copy.deepcopy(model).to(torch.bfloat16), pack=False))
    assert packed_out.token_ids == plain_out.token_ids
    assert packed_out.logprobs == plain_out.logprobs


class _Attention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(64, 96, bias=False)
        self.k_proj = torch.nn.Linear(64, 32, bias=False)
        self.v_proj = torch.nn.Linear(64, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], dim=-1)


def test_sibling_projections_run_as_one_call_with_the_same_values() -> None:
    torch.manual_seed(0)
    fused = _Attention().to(torch.bfloat16)
    plain = copy.deepcopy(fused)
    assert pack_linear_weights(fused) == 3
    x = torch.randn(16, 1, 64).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(fused(x), plain(x))
        assert torch.equal(fused.k_proj(x), plain.k_proj(x))  # alone: its own product
        with torch.no_grad():
            fused.v_proj.weight.mul_(2)
            plain.v_proj.weight.mul_(2)
        assert torch.equal(fused(x), plain(x))  # the stacked matrix was packed again


def test_a_deep_copy_computes_with_its_own_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(_Attention(), torch.nn.Linear(160, 8, bias=False))
    model = model.to(torch.bfloat16)
    plain = copy.deepcopy(model)
    pack_linear_weights(model)
    copied = copy.deepcopy(model)  # falls back to the plain kernel: the same values
    with torch.no_grad():
        for parameters in (copied.parameters(), plain.parameters()):
            for parameter in parameters:
                parameter.mul_(2)
    x = torch.randn(16, 64).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(copied(x), plain(x))
        assert not torch.equal(copied(x), model(x))  # not the original's packed weights


def test_a_sibling_product_does_not_hold_the_stacked_one() -> None:
    # a value projection lives on in the KV cache: it must not keep q and k alive with it
    attention = _Attention().to(torch.bfloat16)
    pack_linear_weights(attention)
    x = torch.randn(4, 64).to(torch.bfloat16)
    with torch.inference_mode():
        attention.q_proj(x)  # computes q, k and v
        attention.k_proj(x)
        value = attention.v_proj(x)
    assert value.untyped_storage().nbytes() == value.numel() * value.element_size()
