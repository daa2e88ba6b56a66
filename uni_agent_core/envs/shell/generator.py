"""The shell task generator: seeded, offline tasks in the style of Terminal-Bench, keyed.

`generate(n, seed, levels, split, key=...)` takes levels in turn from `levels` and, within a
level, its templates in turn (`templates.py`), so a handful of tasks already covers every
template; each task's draws (names, values, file contents) come from
`random.Random(f"shell/{key}/{split}/{seed}/{index}")`. The key is the dataset's secret
(`envs/micro_swe/keys.py`: a dataset's own `dataset.key`, else this host's key): the code and a
task's seed alone do not reproduce its hidden checks. Splits are disjoint by construction:
every word a task is made of comes from its split's own vocabulary.

A task row carries the instruction (`problem_statement`), the shell prompt (`prompt`), the
level (`difficulty`), `env: shell`, and `env_data` (`checks.ShellTaskData`: the setup script,
the hidden check script and its check names). The reference solution stays in the
`GeneratedShellTask`, never in a row. `write_dataset` stores `tasks.jsonl` and `dataset.key`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.envs.micro_swe.generator import TASKS_FILE
from uni_agent_core.envs.micro_swe.keys import KEY_FILE, MIN_KEY_LENGTH, write_key
from uni_agent_core.envs.shell.checks import ShellTaskData, check_script
from uni_agent_core.envs.shell.templates import TEMPLATES, Split, templates_of, vocabulary
from uni_agent_core.types import TaskSpec

LEVELS: tuple[str, ...] = ("L0", "L1")
ENV_NAME = "shell"
"""The task environment of shell tasks (`TaskSpec.env`, `plugins.py`)."""
PROMPT = (
    "You are in a Linux shell; your working directory is {workdir}. Task:\n\n{problem}\n\n"
    "Act with tool calls only; call `submit` when you are done."
)
"""The first user message of a shell task (the harness fills `{workdir}` and `{problem}`)."""


@dataclass(frozen=True)
class GeneratedShellTask:
    """A task row and the reference solution the generator drew with it."""

    task: TaskSpec
    reference: str
    """Bash that solves the task from its starting state, run in the working directory."""


def plan(n: int, levels: Sequence[str]) -> list[str]:
    """The template of each of `n` tasks: levels in turn, each level's templates in turn."""
    names = []
    for index in range(n):
        level = levels[index % len(levels)]
        options = templates_of(level)
        names.append(options[(index // len(levels)) % len(options)].name)
    return names


def build_task(
    index: int, seed: int, template: str, split: Split, *, key: str
) -> GeneratedShellTask:
    """Task `index` of the stream `(key, seed, split)`, made with the template named."""
    if len(key) < MIN_KEY_LENGTH:
        raise ValueError(f"a shell dataset key needs at least {MIN_KEY_LENGTH} characters")
    chosen = {t.name: t for t in TEMPLATES}.get(template)
    if chosen is None:
        raise ValueError(f"unknown shell template {template!r}; expected one of {_names()}")
    rng = random.Random(f"shell/{key}/{split}/{seed}/{index}")
    draft = chosen.draw(rng, vocabulary(split))
    data = ShellTaskData(
        setup=draft.setup,
        check=check_script(draft.checks),
        checks=[check.name for check in draft.checks],
    )
    task = TaskSpec(
        instance_id=f"shell__{template}-{split}-{seed}-{index:04d}",
        problem_statement=draft.statement,
        source={"type": "shell", "seed": seed, "index": index, "split": split},
        difficulty=chosen.level,
        prompt=PROMPT,
        env=ENV_NAME,
        env_data=data.model_dump(),
    )
    return GeneratedShellTask(task, draft.reference)


def _names() -> str:
    return ", ".join(t.name for t in TEMPLATES)


def generate(
    n: int, seed: int, levels: Sequence[str] = LEVELS, split: Split = "train", *, key: str
) -> list[GeneratedShellTask]:
    """`n` tasks of the stream `(key, seed, split)`, levels taken in turn from `levels`."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not levels or any(level not in LEVELS for level in levels):
        raise ValueError(f"levels must name some of {', '.join(LEVELS)}, got {list(levels)}")
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return [
        build_task(index, seed, template, split, key=key)
        for index, template in enumerate(plan(n, levels))
    ]


def write_dataset(tasks: Iterable[GeneratedShellTask], out_dir: str | Path, *, key: str) -> Path:
    """Write `tasks.jsonl` and `dataset.key` (mode 0600) under `out_dir`; returns the JSONL path.

    `key` is the one the tasks were generated with. Reference solutions are not written.
    """
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    write_key(root / KEY_FILE, key)
    rows = [generated.task.model_dump(mode="json", exclude_none=True) for generated in tasks]
    target = root / TASKS_FILE
    target.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return target
