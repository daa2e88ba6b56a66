"""The tasks section: which problems the agent trains on.

A discriminated union on `type`: `micro_swe` (procedural, bundled, runs anywhere), and the
SWE-bench-format datasets `swe_bench`, `swe_rebench` and `r2e_gym` (container images per task).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from uni_agent_core.config.base import ConfigModel

MicroSweLevel = Literal["L0", "L1", "L2", "L3"]
"""Difficulty levels of generated micro-swe tasks, easiest first."""


class MicroSweTasksConfig(ConfigModel):
    """Procedurally generated small repositories with a planted bug and hidden tests."""

    type: Literal["micro_swe"] = "micro_swe"
    """Selects the bundled micro-swe generator."""
    n: int = Field(default=64, ge=1)
    """Number of tasks generated."""
    seed: int = 0
    """Generator seed; equal seeds give identical tasks."""
    levels: list[MicroSweLevel] = Field(default_factory=lambda: ["L0", "L1"], min_length=1)
    """Difficulty levels to draw from, evenly."""
    split: Literal["train", "heldout"] = "train"
    """`train`, or `heldout` (generated from a disjoint seed space; never trained on)."""

    @field_validator("levels")
    @classmethod
    def _check_levels(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"each level may appear once, got {value}")
        return value


class _DatasetTasks(ConfigModel):
    """Fields shared by SWE-bench-format datasets."""

    type: str
    """Dataset kind; each subclass narrows it to its own tag."""

    path_or_dataset: str
    """A local parquet/JSONL file or directory, or a Hugging Face dataset id (pre-downloaded
    into the local cache; runs never download at start)."""
    split: str = "test"
    """Dataset split."""
    max_tasks: int | None = Field(default=None, ge=1)
    """Use at most this many tasks (after `instance_ids`); None uses all."""
    instance_ids: list[str] | None = Field(default=None, min_length=1)
    """Keep only these instances; None keeps all."""
    on_spec_defect: Literal["drop", "flag", "keep"] = "drop"
    """What the validate-data stage does with a defective task (gold patch fails, tests pass
    before the fix, flaky tests, patch does not apply): `drop` it, `flag` it in the report and
    train on it anyway, or `keep` it unchecked."""


class SweBenchTasksConfig(_DatasetTasks):
    """SWE-bench (full, Lite or Verified)."""

    type: Literal["swe_bench"] = "swe_bench"
    """Selects SWE-bench."""
    variant: Literal["verified", "lite", "full"] = "verified"
    """Which SWE-bench release the rows come from (selects image names and log parsers)."""


class SweRebenchTasksConfig(_DatasetTasks):
    """SWE-rebench: continuously collected, decontaminated SWE tasks."""

    type: Literal["swe_rebench"] = "swe_rebench"
    """Selects SWE-rebench."""


class R2EGymTasksConfig(_DatasetTasks):
    """R2E-Gym: tasks synthesized from commit histories, with per-task images."""

    type: Literal["r2e_gym"] = "r2e_gym"
    """Selects R2E-Gym."""


TasksConfig = Annotated[
    MicroSweTasksConfig | SweBenchTasksConfig | SweRebenchTasksConfig | R2EGymTasksConfig,
    Field(discriminator="type"),
]
"""A task source, chosen by its `type:` tag."""

IMAGE_TASKS: frozenset[str] = frozenset({"swe_bench", "swe_rebench", "r2e_gym"})
"""Task types whose repositories come as container images."""
