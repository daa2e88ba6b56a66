"""The micro-swe generator: seeded, offline SWE-bench-form tasks over small Python repositories.

`generate(n, seed, levels, split)` plans `n` repositories (levels drawn evenly, in turn) and
renders each into a `GeneratedTask`: the repository's files at the base commit, and a
`TaskSpec` row with the gold patch, the hidden test patch, FAIL_TO_PASS / PASS_TO_PASS and the
test command. Every draw is keyed by the dataset's secret key as well as the seed (`keys.py`),
so the generator's code alone cannot reproduce a task. `write_dataset` stores rows as
`tasks.jsonl`, the key as `dataset.key`, and each repository's sources under
`repos/<instance_id>/` (no `.git`: the base commit is rebuilt deterministically, see
`base_commit`).

Splits are disjoint by construction: every planted bug (template, mutation, function name)
belongs to exactly one split, so held-out tasks only contain bugs never trained on.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from uni_agent_core.envs.micro_swe import statements
from uni_agent_core.envs.micro_swe.catalog import TEMPLATES, Mutation, Template
from uni_agent_core.envs.micro_swe.keys import KEY_FILE, MIN_KEY_LENGTH, write_key
from uni_agent_core.envs.micro_swe.repo import (
    TEST_COMMAND,
    PlannedFunction,
    PlannedModule,
    PlannedRepo,
    add_cases,
    base_files,
    fixed_files,
    hidden_test_files,
    unittest_id,
)
from uni_agent_core.envs.patches import unified_patch
from uni_agent_core.types import TaskSpec

Split = Literal["train", "heldout"]
LEVELS: tuple[str, ...] = ("L0", "L1", "L2", "L3")
LOG_PARSER = "unittest"
"""Graded with swebench's django/unittest log parser (see `envs/grading.py`)."""
TASKS_FILE = "tasks.jsonl"
REPOS_DIR = "repos"

_PACKAGES = (
    "toolkit",
    "helpers",
    "mathkit",
    "textkit",
    "datakit",
    "utilbox",
    "calclib",
    "strops",
    "listops",
    "numtools",
    "smalllib",
    "pyutils",
)
_MODULES = (
    "core",
    "basics",
    "numeric",
    "strings",
    "sequences",
    "conversions",
    "stats",
    "lists",
    "parsing",
    "misc",
    "arith",
    "text",
)
_HELDOUT_SHARE = 5
"""One bug signature in `_HELDOUT_SHARE` belongs to the held-out split."""

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "micro-swe",
    "GIT_AUTHOR_EMAIL": "micro-swe@agent-rl.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "micro-swe",
    "GIT_COMMITTER_EMAIL": "micro-swe@agent-rl.invalid",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+0000",
}
COMMIT_SCRIPT = (
    "git init -q --template= . && git add -A && "
    + " ".join(f"{key}='{value}'" for key, value in GIT_IDENTITY.items())
    + " git -c commit.gpgsign=false -c core.autocrlf=false commit -q -m 'micro-swe base'"
    + " && git rev-parse HEAD"
)
"""Turns a directory of sources into a one-commit repository and prints the commit; the same
files always give the same commit, on the host and in any sandbox."""


@dataclass(frozen=True)
class GeneratedTask:
    """A task row and its repository's files at the base commit."""

    task: TaskSpec
    files: dict[str, str]


def signature_split(template: Template, mutation: Mutation, name: str) -> Split:
    """The split a planted bug belongs to (stable across versions of Python and runs)."""
    key = f"{template.key}/{mutation.name}/{name}".encode()
    return "heldout" if zlib.crc32(key) % _HELDOUT_SHARE == 0 else "train"


def _bugs_of(split: Split) -> list[tuple[Template, Mutation, str]]:
    return [
        (template, mutation, name)
        for template in TEMPLATES
        for mutation in template.mutations
        for name in template.names
        if signature_split(template, mutation, name) == split
    ]


def _plan(rng: random.Random, level: str, split: Split) -> PlannedRepo:
    bugs = _bugs_of(split)
    n_bugs = 2 if level == "L3" else 1
    chosen: list[tuple[Template, Mutation, str]] = []
    while len(chosen) < n_bugs:
        bug = rng.choice(bugs)
        if all(bug[0] is not other[0] for other in chosen):
            chosen.append(bug)
    used = {bug[0].key for bug in chosen}
    others = [t for t in TEMPLATES if t.key not in used]
    rng.shuffle(others)
    module_names = rng.sample(_MODULES, rng.choice([2, 3]))
    modules = [PlannedModule(name, []) for name in module_names]
    bug_modules = rng.sample(range(len(modules)), n_bugs)
    for (template, mutation, name), index in zip(chosen, bug_modules, strict=True):
        modules[index].functions.append(PlannedFunction(template, name, mutation))
    for module in modules:
        while len(module.functions) < rng.choice([2, 3]):
            template = others.pop()
            module.functions.append(PlannedFunction(template, rng.choice(template.names)))
        rng.shuffle(module.functions)
        for function in module.functions:
            add_cases(function, rng)
    return PlannedRepo(rng.choice(_PACKAGES), modules)


def _statement(repo: PlannedRepo, level: str) -> str:
    bugs = [(m, f) for m in repo.modules for f in m.functions if f.mutation is not None]
    if level == "L3":
        return statements.level3(repo, bugs)
    writer = {"L0": statements.level0, "L1": statements.level1, "L2": statements.level2}[level]
    return writer(repo, *bugs[0])


def base_commit(files: dict[str, str]) -> str:
    """The commit `COMMIT_SCRIPT` makes of these files (computed with this host's git)."""
    with tempfile.TemporaryDirectory(prefix="micro-swe-") as scratch:
        write_files(Path(scratch), files)
        done = subprocess.run(
            ["bash", "-c", COMMIT_SCRIPT],
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
    if done.returncode != 0:
        raise RuntimeError(f"git could not commit a micro-swe repository: {done.stderr.strip()}")
    return done.stdout.strip()


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write `files` (relative path -> text) under `root`."""
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def build_task(index: int, seed: int, level: str, split: Split, *, key: str) -> GeneratedTask:
    """Generate task `index` of the stream `(key, seed, split)` at `level`."""
    if level not in LEVELS:
        raise ValueError(f"unknown micro-swe level {level!r}; expected one of {LEVELS}")
    _check_key(key)
    rng = random.Random(f"micro-swe/{key}/{split}/{seed}/{index}")
    repo = _plan(rng, level, split)
    files = base_files(repo)
    gold = unified_patch({path: files[path] for path in fixed_files(repo)}, fixed_files(repo))
    hidden = hidden_test_files(repo)
    test_patch = unified_patch({path: files[path] for path in hidden}, hidden)
    fail_to_pass, pass_to_pass = [], []
    for module in repo.modules:
        for function in module.functions:
            fail_to_pass += [unittest_id(repo, module, c) for c in function.hidden_failing]
            pass_to_pass += [
                unittest_id(repo, module, c) for c in (*function.visible, *function.hidden_passing)
            ]
    instance_id = f"micro-swe__{repo.package}-{split}-{seed}-{index:04d}"
    task = TaskSpec(
        instance_id=instance_id,
        repo=f"micro-swe/{repo.package}",
        base_commit=base_commit(files),
        problem_statement=_statement(repo, level),
        patch=gold,
        test_patch=test_patch,
        FAIL_TO_PASS=fail_to_pass,
        PASS_TO_PASS=pass_to_pass,
        version="1",
        source={
            "type": "micro_swe",
            "repo_dir": f"{REPOS_DIR}/{instance_id}",
            "seed": seed,
            "index": index,
            "split": split,
        },
        test_cmd=TEST_COMMAND,
        log_parser=LOG_PARSER,
        difficulty=level,
    )
    return GeneratedTask(task, files)


def _check_key(key: str) -> None:
    if len(key) < MIN_KEY_LENGTH:
        raise ValueError(f"a micro-swe key needs at least {MIN_KEY_LENGTH} characters")


def generate(
    n: int, seed: int, levels: Sequence[str] = LEVELS, split: Split = "train", *, key: str
) -> list[GeneratedTask]:
    """`n` tasks of the stream `(key, seed, split)`, levels taken in turn from `levels`."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not levels:
        raise ValueError("levels must name at least one of L0, L1, L2, L3")
    if split not in ("train", "heldout"):
        raise ValueError(f"split must be 'train' or 'heldout', got {split!r}")
    return [build_task(i, seed, levels[i % len(levels)], split, key=key) for i in range(n)]


def write_dataset(tasks: Iterable[GeneratedTask], out_dir: str | Path, *, key: str) -> Path:
    """Write `tasks.jsonl`, `dataset.key` and `repos/<instance_id>/` under `out_dir`.

    Returns the JSONL path. `key` is the one the tasks were generated with. An existing
    `repos/` directory is replaced, so the directory always matches the rows.
    """
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    write_key(root / KEY_FILE, key)
    repos = root / REPOS_DIR
    if repos.exists():
        shutil.rmtree(repos)
    rows = []
    for generated in tasks:
        write_files(repos / generated.task.instance_id, generated.files)
        rows.append(generated.task.model_dump(mode="json", exclude_none=True))
    target = root / TASKS_FILE
    target.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return target
