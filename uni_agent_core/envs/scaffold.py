"""What `agent-rl init env NAME` writes: an installable task-environment package.

The package is complete and runs as written: a task environment (the agent writes its answer to
a file; the score compares it with the task's answer), a task source with a `train` and a
held-out `test` split that share no question, the entry points that name both `NAME` once the
package is `pip install`ed, tests that run every task's reference solution through the scorer,
and a recipe that trains the tiny policy on it for 2 steps and scores the held-out split before
and after. The user replaces the arithmetic with their own kind of task.
"""

from __future__ import annotations

import re
from pathlib import Path

from uni_agent_core.errors import UserError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(UserError, ValueError):
    """The name is not a Python package name, or the directory is taken."""


def scaffold_environment(name: str, parent: Path) -> list[Path]:
    """Write the package `name` under `parent / name`; returns the files written.

    Raises:
        ScaffoldError: `name` is not a lowercase Python identifier, or `parent / name` exists.
    """
    if not _NAME.match(name):
        raise ScaffoldError(
            f"environment name {name!r}: use lowercase letters, digits and `_`, starting with a "
            "letter (it is the package's import name and the name recipes give)"
        )
    root = parent / name
    if root.exists():
        raise ScaffoldError(f"{root} already exists; choose another name or directory")
    fields = {
        "name": name,
        "dist": name.replace("_", "-"),
        "klass": "".join(part.title() for part in name.split("_")) + "Environment",
    }
    files = {
        "pyproject.toml": _PYPROJECT,
        "README.md": _README,
        "recipe.yaml": _RECIPE,
        f"{name}/__init__.py": _INIT,
        f"{name}/environment.py": _ENVIRONMENT,
        f"{name}/tasks.py": _TASKS,
        f"tests/test_{name}.py": _TESTS,
    }
    written = []
    for relative, template in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields))
        written.append(path)
    return written


_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "An agent-rl task environment: {name}"
requires-python = ">=3.11"
dependencies = ["agent-rl"]

# The names a recipe gives once this package is installed (`agent-rl plugins list`).
[project.entry-points."agent_rl.task_envs"]
{name} = "{name}.environment:{klass}"

[project.entry-points."agent_rl.task_sources"]
{name} = "{name}.tasks:load"

[tool.setuptools]
packages = ["{name}"]
"""

_README = """\
# {name}: an agent-rl task environment

Made by `agent-rl init env {name}`. The agent is asked a question and writes its answer to
`answer.txt`; the environment scores the file against the task's answer.

```bash
pip install -e {name}                         # the entry points name `{name}` for recipes
python -m pytest {name}/tests                 # every reference solution scores 1
agent-rl plugins list --kind task_env         # {name}  {name}.environment:{klass}  [{dist} 0.1.0]
agent-rl recipe validate {name}/recipe.yaml
agent-rl train --recipe {name}/recipe.yaml --run-dir runs/{name}
agent-rl eval --recipe {name}/recipe.yaml --suite {name}:test
```

- `{name}/tasks.py`: `load(options, split="train")`, the `train` and held-out `test` splits
  (`eval.suite: heldout` scores `test`, before and after training).
- `{name}/environment.py`: `prepare` (the agent's starting state), `observe` (the final state),
  `score` (the reward). The run's `reward.unfinished` and `reward.leak_audit` apply on top.
- Rows carry the answer in `env_data`, which the agent never sees.

Replace the arithmetic with your own kind of task (see agent-rl's `docs/extending.md`).
"""

_RECIPE = """\
# agent-rl train --recipe {name}/recipe.yaml --run-dir runs/{name}
# {name}'s tasks, trained 2 steps with the tiny policy; its held-out split scored before and
# after. The names `{name}` resolve through the installed package's entry points.
name: {name}
description: "{name}: 2 steps on the tiny policy, held-out split before and after."
seed: 0

policy:
  name: tiny

engine:
  type: hf
  max_batch_size: 4

gateway:
  sampling:
    max_tokens: 64

sandbox:
  type: local
  isolation: none
  wall_clock_s: 120

harness:
  type: react
  max_turns: 2
  wall_clock_s: 60

tasks:
  type: plugin
  path: {name}
  options: {{n: 8}}
  env: {name}

curriculum:
  enabled: false
  best_of_n: 1

trainer:
  mode: sync
  group_size: 2
  batch_size: 2
  lr: 1.0e-4
  total_steps: 2
  max_response_tokens: 1024
  max_context_tokens: 2048
  checkpoint_interval: 2
  keep_checkpoints: 1
  resume: never

eval:
  suite: heldout
  max_tasks: 4
  before_training: true

tracking:
  tracking_uri: sqlite:///mlruns.db
  experiment: {name}
"""

_INIT = '''\
"""{name}: an agent-rl task environment (`{name}.environment`) and its tasks (`{name}.tasks`)."""
'''

_ENVIRONMENT = '''\
"""The `{name}` task environment: the agent writes its answer to `answer.txt`."""

from __future__ import annotations

import shlex

from uni_agent_core.envs.environment import (
    EpisodeFacts,
    Observation,
    Outcome,
    TaskEnvironment,
)
from uni_agent_core.envs.workspace import TaskDataError
from uni_agent_core.sandbox.base import Sandbox, SandboxError
from uni_agent_core.types import TaskSpec, Verification

ANSWER_FILE = "answer.txt"


class {klass}(TaskEnvironment):
    name = "{name}"  # metrics: train/task_env/{name}/..., eval/task_env/{name}/...

    async def prepare(self, sandbox: Sandbox, task: TaskSpec) -> None:
        if "answer" not in task.env_data:
            raise TaskDataError(f"task {{task.instance_id}}: env_data.answer is missing")
        workdir = shlex.quote(str(sandbox.workdir))
        made = await sandbox.exec(f"mkdir -p {{workdir}}", timeout=30)
        if not made.ok:
            raise SandboxError(f"cannot create {{workdir}}: {{made.stderr}}")
        await sandbox.write_file(
            f"{{sandbox.workdir}}/README.txt", f"Write your answer to {{ANSWER_FILE}}.\\n"
        )

    async def observe(self, sandbox: Sandbox, task: TaskSpec) -> Observation:
        path = shlex.quote(f"{{sandbox.workdir}}/{{ANSWER_FILE}}")
        shown = await sandbox.exec(f"cat {{path}} 2>/dev/null", timeout=30)
        return Observation(record=shown.stdout[:1000])

    async def score(self, episode: EpisodeFacts, observation: Observation) -> Outcome:
        solved = observation.record.strip() == str(episode.task.env_data["answer"])
        return Outcome(
            reward=1.0 if solved else 0.0,
            resolved=solved,
            verification=Verification(tests_run=1, passed=int(solved), failed=int(not solved)),
        )
'''

_TASKS = '''\
"""The `{name}` task source: `load(options, split)` returns the tasks of a split.

`train` and the held-out `test` split share no question (the first operand is below 55 in one
and 55 or above in the other), so a held-out score measures what training taught.
"""

from __future__ import annotations

import random
from typing import Any

SPLITS = ("train", "test")


def load(options: dict[str, Any], split: str = "train") -> list[dict[str, Any]]:
    if split not in SPLITS:
        raise ValueError(f"{name} has the splits {{SPLITS}}, not {{split!r}}")
    n = int(options.get("n", 16))
    draw = random.Random(f"{name}-{{split}}")
    low, high = (10, 54) if split == "train" else (55, 99)
    rows = []
    for index in range(n):
        a, b = draw.randint(low, high), draw.randint(10, 99)
        rows.append(
            {{
                "instance_id": f"{name}-{{split}}-{{index:04d}}",
                "problem_statement": (
                    f"What is {{a}} + {{b}}? Write just the number to answer.txt in your "
                    "working directory."
                ),
                "env_data": {{"answer": str(a + b)}},
            }}
        )
    return rows
'''

_TESTS = '''\
"""Every task's reference solution scores 1 through the environment's own scorer, a wrong
answer 0, and the splits share no question."""

from __future__ import annotations

import asyncio

import pytest
from uni_agent_core.config.reward import ResolvedRewardConfig
from uni_agent_core.envs.environment import EnvironmentContext, EpisodeFacts, Observation
from uni_agent_core.types import ExitReason, TaskSpec

from {name}.environment import {klass}
from {name}.tasks import SPLITS, load


def _reward(task: TaskSpec, answer: str) -> float:
    context = EnvironmentContext(None, ResolvedRewardConfig())  # type: ignore[arg-type]
    environment = {klass}(context)
    facts = EpisodeFacts(task, ExitReason.SUBMITTED)
    return asyncio.run(environment.score(facts, Observation(record=answer + "\\n"))).reward


@pytest.mark.parametrize("split", SPLITS)
def test_every_reference_solution_scores_one(split: str) -> None:
    tasks = [TaskSpec.model_validate(row) for row in load({{"n": 16}}, split)]
    assert tasks
    for task in tasks:
        assert _reward(task, task.env_data["answer"]) == 1.0, task.instance_id
        assert _reward(task, "not " + task.env_data["answer"]) == 0.0, task.instance_id


def test_the_splits_share_no_question() -> None:
    train, test = ({{row["problem_statement"] for row in load({{"n": 64}}, s)}} for s in SPLITS)
    assert not train & test
'''
