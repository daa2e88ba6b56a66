"""The SmolLM2 micro-swe RL setting the learning benchmarks share (`rl_gain.py`,
`train_throughput.py`): `recipes/smollm2-cpu.yaml` with the editor and submit tools only, four
turns of at most 128 sampled tokens, L0-L1 tasks, evaluation at one sample."""

from __future__ import annotations

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "smollm2-cpu.yaml"

OVERRIDES = [
    "harness.tools=[editor,submit]",
    "harness.max_turns=4",
    "harness.wall_clock_s=900",
    "gateway.sampling.max_tokens=128",
    "trainer.max_context_tokens=4096",
    "trainer.max_response_tokens=3072",
    "tasks.levels=[L0,L1]",
    "curriculum.enabled=false",
    "eval.k=1",
]


def load(overrides: list[str]):
    """The recipe with the shared setting, sandbox isolation as this machine allows, then
    `overrides`."""
    from uni_agent_core.config import load_recipe

    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    return load_recipe(RECIPE, [*OVERRIDES, f"sandbox.isolation={isolation}", *overrides])
