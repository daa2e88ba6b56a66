"""The pipeline's second act: a recipe's `host_sizing` tier applied for this host.

`sized_for_host(recipe, run_dir, echo)` takes the rate `policy.dtype: auto` measured on this CPU
for the dtype the run computes in (`models/precision_choice.py`, cached per CPU model), picks
the tier of `host_sizing` that rate falls under (`config/sizing.py`), prints it with its reason
and settings, writes the outcome to `<run dir>/sizing.json` and returns the recipe with the
tier's settings applied: every stage after it, the resolved recipe and the warm start's key
see them. A recipe without tiers, or a run on an accelerator, is returned as it is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.sizing import HostSizingTier
from uni_agent_core.inference.builder import resolve_device
from uni_agent_core.models.precision_choice import MIX, ProbeRates
from uni_agent_core.rundir.layout import SIZING


def mix_gflops(rates: ProbeRates) -> float:
    """GFLOP/s over `MIX`'s work (forward, backward and decode in their shares)."""
    return sum(MIX.values()) / rates.seconds_per_gflop()


def tier_for(tiers: Sequence[HostSizingTier], gflops: float) -> HostSizingTier | None:
    """The tier a host measuring `gflops` takes: the lowest `below_gflops` above it."""
    under = [tier for tier in tiers if gflops < tier.below_gflops]
    return min(under, key=lambda tier: tier.below_gflops, default=None)


def sized_for_host(recipe: Recipe, run_dir: Path, echo: Callable[[str], None]) -> Recipe:
    """`recipe` with the `host_sizing` tier of this host applied (see the module docstring)."""
    if not recipe.host_sizing:
        return recipe
    device = resolve_device(recipe.trainer.backend.device)
    if device != "cpu":
        return recipe
    from uni_agent_core.config.loading import parse_recipe
    from uni_agent_core.models.precision_choice import choose_dtype

    choice = choose_dtype(recipe.policy.name, device, echo=echo)
    rates = choice.rates.get(recipe.policy.dtype)
    if rates is None:  # a dtype auto does not measure (float16): no rate to size by
        echo(f"host sizing: {recipe.policy.dtype} is not measured on this CPU; no tier applies")
        return recipe
    gflops = mix_gflops(rates)
    tier = tier_for(recipe.host_sizing, gflops)
    record = {"cpu": choice.cpu, "dtype": recipe.policy.dtype, "gflops": round(gflops, 1)}
    run_dir.mkdir(parents=True, exist_ok=True)
    if tier is None:
        (run_dir / SIZING).write_text(json.dumps({**record, "tier": None}, indent=1) + "\n")
        return recipe
    overrides = tier.overrides()
    echo(
        f"host sizing: {recipe.policy.dtype} runs at {gflops:.0f} GFLOP/s on this CPU (below "
        f"{tier.below_gflops:g}): {tier.reason}; {' '.join(overrides)}"
    )
    (run_dir / SIZING).write_text(
        json.dumps({**record, "tier": tier.model_dump(mode="json")}, indent=1) + "\n"
    )
    data = recipe.model_dump(mode="json")
    return parse_recipe(data, overrides, source=f"host_sizing (below {tier.below_gflops:g})")
