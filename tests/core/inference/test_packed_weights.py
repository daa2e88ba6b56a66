"""oneDNN-packed bf16 weights: the same results as plain bf16, following every weight change;
where packing cannot run (an AVX2-only CPU, or forced off), nothing is packed and the plain
kernel computes."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from uni_agent_core.host_cpu import NATIVE_PATHS_VARIABLE
from uni_agent_core.inference import GenerateRequest, HFEngine, packed_weights
from uni_agent_core.inference.packed_weights import pack_linear_weights
from uni_agent_core.inference.packed_weights import packed_module as packed

needs_packing = pytest.mark.skipif(
    not packed_weights.packing_supported(),
    reason=f"oneDNN cannot pack bf16 here: {packed_weights._packing_unavailable()}",
)


@pytest.fixture
def packing_off(monkeypatch):
    """The path of a CPU where oneDNN cannot pack bf16 (an AVX2-only one), on any host."""
    monkeypatch.setenv(NATIVE_PATHS_VARIABLE, "0")
    packed_weights.packing_supported.cache_clear()
    yield
    monkeypatch.delenv(NATIVE_PATHS_VARIABLE)
    packed_weights.packing_supported.cache_clear()


def test_where_packing_cannot_run_nothing_is_packed_and_the_reason_is_logged(
    packing_off, caplog
) -> None:
    layer = _linear()
    plain = copy.deepcopy(layer)
    with caplog.at_level("INFO", logger=packed_weights.__name__):
        assert pack_linear_weights(layer) == 0
        assert pack_linear_weights(_Attention().to(torch.bfloat16)) == 0
    assert not packed(layer)
    reasons = [r.getMessage() for r in caplog.records if "packing off" in r.getMessage()]
    off = f"bf16 weight packing off, plain bf16 linear layers run: {NATIVE_PATHS_VARIABLE}=0"
    assert reasons == [off]
    x = torch.randn(16, 64).to(torch.bfloat16)
    with torch.inference_mode():
        assert torch.equal(layer(x), plain(x))


def test_an_engine_on_a_cpu_that_cannot_pack_samples_with_plain_bf16(
    packing_off, tiny_policy
) -> None:
    model, tokenizer = tiny_policy
    bf16 = copy.deepcopy(model).to(torch.bfloat16)
    request = GenerateRequest(prompt_ids=[1, 2, 3, 4, 5], max_new_tokens=6, temperature=1, seed=4)

    async def generate():
        engine = HFEngine(bf16, tokenizer)
        try:
            return await engine.generate(request)
        finally:
            await engine.close()

    out = asyncio.run(generate())
    assert not any(packed(m) for m in bf16.modules())
    assert len(out.token_ids) == 6 and all(lp <= 0 for lp in out.logprobs)


def test_a_cpu_whose_onednn_refuses_bf16_declines_with_its_message(monkeypatch) -> None:
    def refuse(weight, rows):
        raise RuntimeError(
            "mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert or "
            "avx512bw, avx512vl and avx512dq\nException raised from ..."
        )

    monkeypatch.delenv(NATIVE_PATHS_VARIABLE, raising=False)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse)
    reason = packed_weights._packing_unavailable()
    assert reason is not None and reason.endswith("avx512bw, avx512vl and avx512dq")


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(64, 96, bias=False).to(torch.bfloat16)


@needs_packing
def test_a_packed_layer_computes_exactly_what_the_plain_one_does() -> None:
    layer = _linear()
    plain = copy.deepcopy(layer)
    assert pack_linear_weights(layer) == 1 and packed(layer)
    for shape in ((16, 64), (3, 1, 64), (2, 40, 64)):
        x = torch.randn(*shape).to(torch.bfloat16)
        with torch.inference_mode():
            assert torch.equal(layer(x), plain(x))


@needs_packing
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


@needs_packing
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


@needs_packing
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


@needs_packing
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


@needs_packing
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


@needs_packing
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
