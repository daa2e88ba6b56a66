"""A recipe's `host_sizing` tier applies on a CPU below its measured rate, and only there
(`uni_agent_core/pipeline/sizing.py`); a tier's settings are checked when the recipe loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.config.problems import RecipeError
from uni_agent_core.config.sizing import HostSizingTier
from uni_agent_core.models.precision_choice import ProbeRates, decide
from uni_agent_core.pipeline.sizing import mix_gflops, sized_for_host, tier_for
from uni_agent_core.rundir.layout import SIZING

RECIPES = Path(__file__).resolve().parents[3] / "recipes"

# probe results recorded per CPU class (tests/core/models/test_precision_choice.py has them all)
AVX2_EPYC = {"float32": ProbeRates(30.0, 50.1, 62.2), "bfloat16": ProbeRates(11.6, 2.3, 9.6)}
AVX512_BF16_EPYC = {
    "float32": ProbeRates(49.0, 49.0, 49.0),
    "bfloat16": ProbeRates(122.0, 122.0, 122.0),
}
AMX_XEON = {
    "float32": ProbeRates(355.0, 355.0, 355.0),
    "bfloat16": ProbeRates(3200.0, 3200.0, 3200.0),
}
SLOW_TIER = [
    "host_sizing=[{below_gflops: 100, reason: slow, set: {trainer.lr: 0.125, "
    "harness.tool_schemas: compact}}]"
]


def _on(monkeypatch, rates) -> None:
    monkeypatch.setattr(
        "uni_agent_core.models.precision_choice.choose_dtype",
        lambda *a, **k: decide(rates, 0.9999, cpu="recorded"),
    )


def test_the_mix_rate_weighs_each_kind_by_its_share_of_the_work() -> None:
    assert mix_gflops(ProbeRates(100.0, 100.0, 100.0)) == pytest.approx(100.0)
    # forward 1, backward 2, decode 1 (MIX): 4 GFLOP in 1/30 + 2/50.1 + 1/62.2 s
    assert mix_gflops(AVX2_EPYC["float32"]) == pytest.approx(44.8, abs=0.05)


def test_the_lowest_tier_above_the_rate_applies() -> None:
    tiers = [
        HostSizingTier(below_gflops=100, reason="slow", set={"seed": 1}),
        HostSizingTier(below_gflops=50, reason="very slow", set={"seed": 2}),
    ]
    assert tier_for(tiers, 40.0) is tiers[1]
    assert tier_for(tiers, 80.0) is tiers[0]
    assert tier_for(tiers, 100.0) is None


def test_a_cpu_below_the_tier_takes_its_settings_and_says_so(monkeypatch, tmp_path) -> None:
    _on(monkeypatch, AVX2_EPYC)
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=float32", *SLOW_TIER])
    lines: list[str] = []

    sized = sized_for_host(recipe, tmp_path, lines.append)

    assert sized.trainer.lr == 0.125 and sized.harness.tool_schemas == "compact"
    assert recipe.trainer.lr != 0.125  # the recipe given is not changed
    assert len(lines) == 1 and lines[0].startswith("host sizing: float32 runs at 45 GFLOP/s")
    assert 'slow; trainer.lr=0.125 harness.tool_schemas="compact"' in lines[0]
    record = json.loads((tmp_path / SIZING).read_text())
    assert record["gflops"] == 44.8 and record["tier"]["below_gflops"] == 100


@pytest.mark.parametrize("rates", [AVX512_BF16_EPYC, AMX_XEON], ids=["avx512-bf16", "amx"])
def test_a_cpu_above_every_tier_keeps_the_recipe(monkeypatch, tmp_path, rates) -> None:
    _on(monkeypatch, rates)
    recipe = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=bfloat16", *SLOW_TIER])
    lines: list[str] = []
    assert sized_for_host(recipe, tmp_path, lines.append) == recipe
    assert lines == [] and json.loads((tmp_path / SIZING).read_text())["tier"] is None


def test_an_accelerator_or_a_recipe_without_tiers_is_not_sized(monkeypatch, tmp_path) -> None:
    _on(monkeypatch, AVX2_EPYC)
    plain = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=float32"])
    assert sized_for_host(plain, tmp_path, print) is plain
    monkeypatch.setattr("uni_agent_core.pipeline.sizing.resolve_device", lambda device: "cuda")
    tiered = load_recipe(RECIPES / "ci-smoke.yaml", ["policy.dtype=float32", *SLOW_TIER])
    assert sized_for_host(tiered, tmp_path, print) is tiered
    assert not (tmp_path / SIZING).exists()


def test_a_tier_with_a_bad_setting_fails_the_recipe_on_every_host() -> None:
    bad = "host_sizing=[{below_gflops: 100, reason: slow, set: {trainer.group_size: 0}}]"
    with pytest.raises(RecipeError) as raised:
        load_recipe(RECIPES / "ci-smoke.yaml", [bad])
    assert "host_sizing.0.set" in str(raised.value) and "trainer.group_size" in str(raised.value)


def test_the_demo_cuts_its_work_on_an_avx2_cpu_and_keeps_it_with_native_bf16(
    monkeypatch, tmp_path
) -> None:
    _on(monkeypatch, AVX2_EPYC)
    demo = load_recipe(RECIPES / "demo-cpu.yaml", ["policy.dtype=float32"])
    sized = sized_for_host(demo, tmp_path, print)
    assert (sized.warm_start.epochs, sized.harness.tool_schemas) == (1, "compact")
    assert sized.trainer.backend.trainable_layers == 10 and sized.eval.every_n_checkpoints == 2
    # what the demo must show is kept: 48 paired held-out tasks, before and after RL
    assert sized.eval.max_tasks == 48 and sized.eval.before_training
    assert sized.trainer.total_steps == demo.trainer.total_steps
    _on(monkeypatch, AVX512_BF16_EPYC)
    demo = load_recipe(RECIPES / "demo-cpu.yaml", ["policy.dtype=bfloat16"])
    assert sized_for_host(demo, tmp_path, print) == demo
