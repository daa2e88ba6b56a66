"""The tasks section: which problems the agent trains on.

A discriminated union on `type`: the generated kinds `micro_swe` (small repositories with a
planted bug) and `shell` (shell tasks with a hidden check script), both bundled and runnable
anywhere; the SWE-bench-format datasets `swe_bench`, `swe_rebench` and `r2e_gym` (container
images per task); `file` (rows in agent-rl's task form) and `plugin` (a user's loader, by import
path); and `mix`, the tasks of several of those sections interleaved. Every source may set
`env:`, the task environment of all its tasks (`envs/environment.py`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from uni_agent_core.config.base import ConfigModel, PluginRef, raise_conflicts

MicroSweLevel = Literal["L0", "L1", "L2", "L3"]
"""Difficulty levels of generated micro-swe tasks, easiest first."""
ShellLevel = Literal["L0", "L1"]
"""Difficulty levels of generated shell tasks: one operation (`L0`), two or three (`L1`)."""


def _easiest_micro_swe_levels() -> list[MicroSweLevel]:
    return ["L0", "L1"]


def _shell_levels() -> list[ShellLevel]:
    return ["L0", "L1"]


EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][\w.-]*(:[A-Za-z_][\w.]*)?$")]
"""A task environment: a registered name (`swe`, `shell`) or `package.module:Class`."""


class _TaskSource(ConfigModel):
    """What every task source has."""

    env: EnvName | None = None
    """The task environment of every task of this source (`swe`, `shell`, or a user's
    `package.module:Class`, `docs/extending.md`); None keeps the source's own (`swe` for
    repository tasks, `shell` for shell tasks, a row's `env` for files)."""


class _GeneratedTasks(_TaskSource):
    """What the generated kinds share: `levels` (declared by each, with its own levels) may
    name each level once."""

    @field_validator("levels", check_fields=False)
    @classmethod
    def _check_levels(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError(f"each level may appear once, got {value}")
        return value


class MicroSweTasksConfig(_GeneratedTasks):
    """Procedurally generated small repositories with a planted bug and hidden tests."""

    type: Literal["micro_swe"] = "micro_swe"
    """Selects the bundled micro-swe generator."""
    n: int = Field(default=64, ge=1)
    """Number of tasks generated."""
    seed: int = 0
    """Generator seed; equal seeds give identical tasks."""
    levels: list[MicroSweLevel] = Field(default_factory=_easiest_micro_swe_levels, min_length=1)
    """Difficulty levels to draw from, evenly."""
    split: Literal["train", "heldout"] = "train"
    """`train`, or `heldout` (generated from a disjoint seed space; never trained on)."""


class ShellTasksConfig(_GeneratedTasks):
    """Procedurally generated shell tasks (Terminal-Bench style): starting files, an
    instruction, and a hidden check script that inspects the final state."""

    type: Literal["shell"] = "shell"
    """Selects the bundled shell task generator."""
    n: int = Field(default=32, ge=1)
    """Number of tasks generated."""
    seed: int = 0
    """Generator seed; equal seeds (and dataset keys) give identical tasks."""
    levels: list[ShellLevel] = Field(default_factory=_shell_levels, min_length=1)
    """Difficulty levels to draw from, in turn (each level's templates in turn)."""
    split: Literal["train", "heldout"] = "train"
    """`train`, or `heldout` (made of words the training split never uses)."""


class _DatasetTasks(_TaskSource):
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


class FileTasksConfig(_TaskSource):
    """Task rows in agent-rl's form (`TaskSpec` fields, one JSON object per line, or JSON or
    parquet), each row's kind recognised by its columns (SWE-bench-format rows work too)."""

    type: Literal["file"] = "file"
    """Selects a file of task rows."""
    path: str
    """A JSONL/JSON/parquet file, or a directory of them."""
    max_tasks: int | None = Field(default=None, ge=1)
    """Use at most the first this many rows; None uses all."""


class PluginTasksConfig(_TaskSource):
    """A user's task source, by import path (`docs/extending.md`)."""

    type: Literal["plugin"] = "plugin"
    """Selects a user's task source."""
    path: PluginRef
    """`package.module:function`, or an installed package's `agent_rl.task_sources` name: called
    with `options`, it returns the tasks, as `TaskSpec`s or rows in agent-rl's task form."""
    options: dict[str, Any] = Field(default_factory=dict)
    """Handed to the function as one mapping; its meaning is the source's own."""


SourceTasksConfig = Annotated[
    MicroSweTasksConfig
    | ShellTasksConfig
    | SweBenchTasksConfig
    | SweRebenchTasksConfig
    | R2EGymTasksConfig
    | FileTasksConfig
    | PluginTasksConfig,
    Field(discriminator="type"),
]
"""One task source, chosen by its `type:` tag (a `mix` member)."""


class MixTasksConfig(ConfigModel):
    """The tasks of several sources, interleaved: the first task of each source in the order
    listed, then the second of each, and so on (a source that runs out drops out), so every
    prefix of the task list (the warm start's first `warm_start.tasks`, an evaluation's first
    `max_tasks`) mixes kinds; training draws from all of them in a seeded, reshuffled order.
    Instance ids must stay unique across the sources."""

    type: Literal["mix"] = "mix"
    """Selects a mix of task sources."""
    sources: list[SourceTasksConfig] = Field(min_length=2)
    """The sources (any `tasks:` section but a mix), at least two."""

    @model_validator(mode="after")
    def _check_sources(self) -> MixTasksConfig:
        problems: list[tuple[str, str]] = []
        seen: dict[tuple[str, int, str], int] = {}
        for index, source in enumerate(self.sources):
            if not isinstance(source, MicroSweTasksConfig | ShellTasksConfig):
                continue
            stream = (source.type, source.seed, source.split)
            if stream in seen:
                problems.append(
                    (
                        f"sources.{index}.seed",
                        f"{source.type} source {index} draws from the same stream as source "
                        f"{seen[stream]} (seed {source.seed}, split {source.split}), so their "
                        "instance ids would collide; give it another seed",
                    )
                )
            seen.setdefault(stream, index)
        raise_conflicts(problems)
        return self


TasksConfig = Annotated[
    MicroSweTasksConfig
    | ShellTasksConfig
    | SweBenchTasksConfig
    | SweRebenchTasksConfig
    | R2EGymTasksConfig
    | FileTasksConfig
    | PluginTasksConfig
    | MixTasksConfig,
    Field(discriminator="type"),
]
"""A task source, chosen by its `type:` tag."""

IMAGE_TASKS: frozenset[str] = frozenset({"swe_bench", "swe_rebench", "r2e_gym"})
"""Task types whose repositories come as container images."""

GENERATED_TASKS: frozenset[str] = frozenset({"micro_swe", "shell"})
"""Task types generated here, each with a held-out split (`eval.suite: heldout`)."""


def task_types(config: ConfigModel) -> set[str]:
    """The source types a `tasks:` section draws from (a mix's members; otherwise its own)."""
    if isinstance(config, MixTasksConfig):
        return {source.type for source in config.sources}
    return {str(getattr(config, "type", ""))}
