"""`policy.dtype: auto` (`uni_agent_core/models/precision_choice.py`): the rule on probe results
recorded on each CPU class, the cache, and the measurement itself on this host."""

from __future__ import annotations

import json

import pytest

from uni_agent_core.models import precision_choice
from uni_agent_core.models.precision_choice import (
    PEARSON_FLOOR,
    DtypeChoice,
    ProbeRates,
    choose_dtype,
    decide,
    resolve_dtype,
)

# GFLOP/s of SmolLM2-135M's MLP projection (576 x 1536), recorded per CPU class.
AVX2_EPYC = {
    # `probe_rates` on 2 cores of an AMD EPYC (family 25, model 1) with AVX2 and no AVX-512,
    # torch 2.13.0: bf16 runs PyTorch's reference GEMM on one thread.
    "float32": ProbeRates(forward=30.0, backward=50.1, decode=62.2),
    "bfloat16": ProbeRates(forward=11.6, backward=2.3, decode=9.6),
}
# The other classes have one recorded rate each (a 2048x576 @ 576x1536 matmul, bench/README.md),
# taken here for all three kinds.
AVX512_BF16_EPYC = {
    # 2 cores of an AMD EPYC with AVX512-BF16
    "float32": ProbeRates(forward=49.0, backward=49.0, decode=49.0),
    "bfloat16": ProbeRates(forward=122.0, backward=122.0, decode=122.0),
}
AMX_XEON = {
    # 2 cores of an Intel Xeon with AMX
    "float32": ProbeRates(forward=355.0, backward=355.0, decode=355.0),
    "bfloat16": ProbeRates(forward=3200.0, backward=3200.0, decode=3200.0),
}


def test_an_avx2_only_cpu_chooses_float32_and_says_how_much_slower_bf16_is() -> None:
    choice = decide(AVX2_EPYC, pearson=None)
    assert choice.dtype == "float32"
    assert "bfloat16 runs at 0.08x float32's rate here" in choice.reason
    assert "no native bf16 matmul" in choice.reason
    assert choice.speedup("bfloat16") == pytest.approx(0.084, abs=0.005)


@pytest.mark.parametrize("rates", [AVX512_BF16_EPYC, AMX_XEON], ids=["avx512_bf16", "amx"])
def test_a_cpu_with_native_bf16_chooses_it_when_its_logprobs_match(rates) -> None:
    choice = decide(rates, pearson=0.99988)
    assert choice.dtype == "bfloat16"
    assert "float32's rate on this CPU, logprob Pearson 0.99988" in choice.reason
    assert choice.speedup("bfloat16") > 2


def test_bf16_that_does_not_match_float32_is_not_chosen_however_fast() -> None:
    choice = decide(AMX_XEON, pearson=PEARSON_FLOOR - 0.01)
    assert choice.dtype == "float32"
    assert "logprob Pearson" in choice.reason and "< 0.999" in choice.reason
    assert decide(AMX_XEON, pearson=None).dtype == "float32"  # unmeasured: not chosen


def test_float32_takes_a_near_tie() -> None:
    even = {"float32": AVX2_EPYC["float32"], "bfloat16": ProbeRates(31.0, 52.0, 64.0)}
    assert decide(even, pearson=1.0).dtype == "float32"


def test_an_accelerator_takes_bf16_without_measuring(monkeypatch) -> None:
    monkeypatch.setattr(precision_choice, "probe_rates", pytest.fail)
    assert choose_dtype("tiny", "cuda").dtype == "bfloat16"
    assert resolve_dtype("auto", "tiny", "npu") == "bfloat16"
    assert resolve_dtype("float32", "tiny", "cuda") == "float32"


def test_a_host_measures_once_then_reads_its_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(precision_choice, "cache_root", lambda: tmp_path)
    probed: list[str] = []

    def recorded(dtype, hidden, intermediate):
        probed.append(dtype)
        return AVX2_EPYC[dtype]

    monkeypatch.setattr(precision_choice, "probe_rates", recorded)
    lines: list[str] = []
    first = choose_dtype("tiny", echo=lines.append)
    assert first.dtype == "float32" and first.measured and probed == ["float32", "bfloat16"]
    assert lines and "measuring float32 and bfloat16" in lines[0]
    again = choose_dtype("tiny", echo=lines.append)
    assert again.dtype == "float32" and not again.measured and len(probed) == 2
    assert again.rates == first.rates and len(lines) == 1
    (cached,) = (tmp_path / "precision").iterdir()
    assert json.loads(cached.read_text())["dtype"] == "float32"


def test_the_choice_reports_its_rates_in_one_line_and_as_flat_params() -> None:
    choice = decide(AVX2_EPYC, pearson=None, cpu="AMD EPYC (avx2)")
    line = choice.summary()
    assert line.startswith("policy.dtype auto -> float32: fastest on this CPU")
    assert "bfloat16 fwd 11.6 bwd 2.3 decode 9.6 GFLOP/s" in line
    params = choice.params()
    assert params["dtype"] == "float32" and params["bfloat16_backward_gflops"] == 2.3
    assert DtypeChoice.from_json(choice.to_json()).rates == choice.rates


def test_the_probe_measures_this_host() -> None:
    rates = precision_choice.probe_rates("float32", 64, 128)
    assert rates.forward > 0 and rates.backward > 0 and rates.decode > 0


def test_bf16_logprobs_of_the_tiny_policy_track_float32s() -> None:
    assert precision_choice.bf16_logprob_pearson("tiny") > 0.9
