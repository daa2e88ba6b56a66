"""Task sources: rows from files or datasets into `TaskSpec`s, for any `tasks:` section.

`read_rows` reads a JSONL/JSON/parquet file, a directory of them (a generated dataset's
`tasks.jsonl`, or `<split>-*.parquet` / `data/<split>-*.parquet` as the Hub lays them out), or a
`datasets` dataset id (only when the machine has the dataset cached or network).
`task_from_row` recognises a row's kind by its columns (agent-rl/micro-swe/shell rows,
SWE-rebench, R2E-Gym, SWE-bench); `load_tasks` builds a recipe's task set, generating micro-swe
and shell datasets into the cache on first use (keyed, hidden from sandboxes) and interleaving
the sources of a `mix`.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from uni_agent_core.config.tasks import (
    FileTasksConfig,
    MicroSweTasksConfig,
    MixTasksConfig,
    PluginTasksConfig,
    ShellTasksConfig,
    SourceTasksConfig,
    TasksConfig,
)
from uni_agent_core.envs.micro_swe import generator as micro_swe
from uni_agent_core.envs.micro_swe.generator import TASKS_FILE
from uni_agent_core.envs.micro_swe.keys import KEY_FILE, dataset_key
from uni_agent_core.envs.r2e_gym import r2e_gym_task
from uni_agent_core.envs.shell import generator as shell
from uni_agent_core.envs.swe_bench import swe_bench_task, swe_rebench_task
from uni_agent_core.errors import UserError
from uni_agent_core.plugins import resolve
from uni_agent_core.types import TaskSpec

_ROW_SUFFIXES = (".jsonl", ".json", ".parquet")


class TaskSourceError(UserError, ValueError):
    """Task rows could not be read or understood; the message says which file or row."""


def _rows_of_file(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        return list(json.loads(text))
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise TaskSourceError(f"{path}:{number}: not a JSON row ({error.msg})") from error
    return rows


def _files_of_dir(directory: Path, split: str) -> list[Path]:
    if (directory / TASKS_FILE).is_file():
        return [directory / TASKS_FILE]
    for root in (directory, directory / "data"):
        matching = sorted(p for p in root.glob(f"{split}-*") if p.suffix in _ROW_SUFFIXES)
        matching += sorted(p for p in root.glob(f"{split}.*") if p.suffix in _ROW_SUFFIXES)
        if matching:
            return matching
    files = sorted(p for p in directory.iterdir() if p.suffix in _ROW_SUFFIXES)
    if not files:
        raise TaskSourceError(f"{directory}: no {TASKS_FILE}, {split}-*.parquet or *.jsonl rows")
    return files


def read_rows(path_or_dataset: str | Path, split: str = "test") -> list[dict[str, Any]]:
    """Every row of a local file or directory, or of a `datasets` dataset id.

    Local micro-swe rows get their `source.repo_dir` made absolute (relative to the file); they
    and local shell rows get `source.hide` set to the dataset directory, which sandboxes must
    not show the agent (it holds the answers: gold patches, hidden tests and check scripts).

    Raises:
        TaskSourceError: the path holds no rows, a row is not JSON, or the dataset id cannot be
            loaded offline.
    """
    path = Path(path_or_dataset).expanduser()
    if path.exists():
        files = _files_of_dir(path, split) if path.is_dir() else [path]
        rows: list[dict[str, Any]] = []
        for file in files:
            for row in _rows_of_file(file):
                rows.append(_resolve_local_source(row, file.parent.resolve()))
        return rows
    if str(path_or_dataset).count("/") != 1:
        raise TaskSourceError(f"{path_or_dataset}: no such file or directory")
    try:
        import datasets

        return list(datasets.load_dataset(str(path_or_dataset), split=split))
    except Exception as error:  # noqa: BLE001 - datasets raises many kinds; report them all
        raise TaskSourceError(
            f"{path_or_dataset}: not a local path, and the dataset could not be loaded "
            f"({type(error).__name__}: {error}). Download it first (with network) or point "
            "path_or_dataset at a local parquet/JSONL copy."
        ) from error


def _resolve_local_source(row: dict[str, Any], base: Path) -> dict[str, Any]:
    source = row.get("source")
    if not isinstance(source, dict):
        return row
    if source.get("type") == "micro_swe" and "repo_dir" in source:
        repo_dir = Path(source["repo_dir"])
        row = dict(row)
        row["source"] = {
            **source,
            "repo_dir": str(repo_dir if repo_dir.is_absolute() else base / repo_dir),
            "hide": [str(base)],
        }
    elif source.get("type") == "shell":
        row = dict(row)
        row["source"] = {**source, "hide": [str(base)]}
    return row


def row_kind(row: dict[str, Any]) -> str:
    """Which schema a row follows: `agent_rl`, `swe_rebench`, `r2e_gym` or `swe_bench`."""
    if isinstance(row.get("source"), dict) and "test_cmd" in row:
        return "agent_rl"
    if "repo_name" in row and "expected_output_json" in row:
        return "r2e_gym"
    if "install_config" in row:
        return "swe_rebench"
    if "instance_id" in row and "FAIL_TO_PASS" in row:
        return "swe_bench"
    if {"instance_id", "problem_statement"} <= set(row) <= set(TaskSpec.model_fields):
        return "agent_rl"  # a task of another environment: `env`, `env_data`, no repository
    raise TaskSourceError(
        f"row {row.get('instance_id', '?')!r} is neither an agent-rl, SWE-bench, SWE-rebench "
        f"nor R2E-Gym row (columns: {', '.join(sorted(row)[:12])})"
    )


def task_from_row(row: dict[str, Any], kind: str | None = None) -> TaskSpec:
    """A row as a task; `kind` forces a schema (`swe_bench`, `swe_rebench`, `r2e_gym`)."""
    kind = kind or row_kind(row)
    if kind == "agent_rl":
        return TaskSpec.model_validate(row)
    if kind == "swe_rebench":
        return swe_rebench_task(row)
    if kind == "r2e_gym":
        return r2e_gym_task(row)
    if kind == "swe_bench":
        return swe_bench_task(row)
    raise TaskSourceError(f"unknown row kind {kind!r}")


def load_task_file(path: str | Path, split: str = "test") -> list[TaskSpec]:
    """Every task of a local file or directory, each row's kind recognised by its columns."""
    return [task_from_row(row) for row in read_rows(path, split)]


def _generated_dir(
    kind: str, config: MicroSweTasksConfig | ShellTasksConfig, cache: Path | None
) -> Path:
    from uni_agent_core.models.registry import cache_root

    levels = "".join(config.levels)
    name = f"{config.split}-s{config.seed}-n{config.n}-{levels}"
    return (cache or cache_root()) / "tasks" / kind / name


def micro_swe_dir(config: MicroSweTasksConfig, cache: Path | None = None) -> Path:
    """Where the tasks of a micro-swe section are generated (under the agent-rl cache)."""
    return _generated_dir("micro_swe", config, cache)


def shell_dir(config: ShellTasksConfig, cache: Path | None = None) -> Path:
    """Where the tasks of a shell section are generated (under the agent-rl cache)."""
    return _generated_dir("shell", config, cache)


def _load_generated(
    config: MicroSweTasksConfig | ShellTasksConfig, cache: Path | None
) -> list[TaskSpec]:
    if isinstance(config, ShellTasksConfig):
        directory = shell_dir(config, cache)

        def write(key: str) -> None:
            made = shell.generate(config.n, config.seed, config.levels, config.split, key=key)
            shell.write_dataset(made, directory, key=key)
    else:
        directory = micro_swe_dir(config, cache)

        def write(key: str) -> None:
            made = micro_swe.generate(config.n, config.seed, config.levels, config.split, key=key)
            micro_swe.write_dataset(made, directory, key=key)

    # A cached dataset without its key was made by an unkeyed generator, which anyone can
    # rerun: it is made again, keyed.
    if not (directory / TASKS_FILE).is_file() or not (directory / KEY_FILE).is_file():
        write(dataset_key(directory, cache))
    return load_task_file(directory)


def interleave(task_sets: Sequence[Sequence[TaskSpec]]) -> list[TaskSpec]:
    """The first task of each set in turn, then the second of each, ... (a set that runs out
    drops out).

    Raises:
        TaskSourceError: two tasks share an instance id (episodes, history and metrics are
            keyed by it).
    """
    mixed: list[TaskSpec] = []
    owner: dict[str, int] = {}
    for position in range(max((len(tasks) for tasks in task_sets), default=0)):
        for index, tasks in enumerate(task_sets):
            if position >= len(tasks):
                continue
            task = tasks[position]
            if task.instance_id in owner:
                first, second = sorted((owner[task.instance_id], index))
                raise TaskSourceError(
                    f"tasks.sources.{first} and tasks.sources.{second} both hold a task "
                    f"{task.instance_id!r}; instance ids must be unique across a "
                    "mix (give a generated source another seed, or narrow a dataset's "
                    "instance_ids)"
                )
            owner[task.instance_id] = index
            mixed.append(task)
    return mixed


def load_tasks(config: TasksConfig, *, cache: Path | None = None) -> list[TaskSpec]:
    """The task set of a recipe's `tasks:` section.

    micro-swe and shell tasks are generated once into the cache (keyed; hidden from local
    sandboxes); dataset sections read their rows, keep `instance_ids`, then the first
    `max_tasks`; a mix interleaves its sources' tasks (`interleave`).

    Raises:
        TaskSourceError: rows cannot be read, or a mix repeats an instance id.
    """
    if isinstance(config, MixTasksConfig):
        return interleave([load_tasks(source, cache=cache) for source in config.sources])
    tasks = _load_source(config, cache)
    if config.env is not None:
        tasks = [task.model_copy(update={"env": config.env}) for task in tasks]
    return tasks


def _load_source(config: SourceTasksConfig, cache: Path | None) -> list[TaskSpec]:
    if isinstance(config, MicroSweTasksConfig | ShellTasksConfig):
        return _load_generated(config, cache)
    if isinstance(config, FileTasksConfig):
        return load_task_file(config.path)[: config.max_tasks]
    if isinstance(config, PluginTasksConfig):
        return _load_plugin(config)
    rows = read_rows(config.path_or_dataset, config.split)
    if config.instance_ids is not None:
        wanted = set(config.instance_ids)
        rows = [row for row in rows if _row_id(row) in wanted]
    if config.max_tasks is not None:
        rows = rows[: config.max_tasks]
    if config.type == "swe_bench":
        return [swe_bench_task(row, config.variant) for row in rows]
    return [task_from_row(row, config.type) for row in rows]


def has_splits(source: Any) -> bool:
    """Whether a user's task source function takes a `split` (`train`, `test`, ...): then its
    held-out split can be evaluated (`eval.suite: heldout`, `NAME:test`)."""
    try:
        return "split" in inspect.signature(source).parameters
    except (TypeError, ValueError):
        return False


def load_plugin_split(config: PluginTasksConfig, split: str) -> list[TaskSpec]:
    """The `split` of a user's source (its function called with `split=`), the source's `env`
    kept.

    Raises:
        TaskSourceError: the function takes no `split`, or returned something else than tasks.
    """
    tasks = _load_plugin(config, split)
    if config.env is not None:
        tasks = [task.model_copy(update={"env": config.env}) for task in tasks]
    return tasks


def _load_plugin(config: PluginTasksConfig, split: str | None = None) -> list[TaskSpec]:
    """A user's source's tasks (`TaskSpec`s, or rows in agent-rl's task form); with `split`,
    that split's.

    Raises:
        PluginError: its path does not import.
        TaskSourceError: it returned something that is not a task or a task row, or a split
            was asked of a function that takes none.
    """
    source = resolve("task_source", config.path)
    if split is None:
        loaded = source(dict(config.options))
    elif has_splits(source):
        loaded = source(dict(config.options), split=split)
    else:
        raise TaskSourceError(
            f"{config.path} has no {split!r} split: give its function a `split` parameter "
            '(`def load(options, split="train")`) to evaluate its held-out tasks'
        )
    tasks = []
    for index, item in enumerate(loaded):
        if isinstance(item, TaskSpec):
            tasks.append(item)
            continue
        try:
            tasks.append(TaskSpec.model_validate(item))
        except ValidationError as error:
            raise TaskSourceError(
                f"{config.path}: item {index} is not a task ({error.error_count()} problems: "
                f"{error.errors()[0]['loc']}: {error.errors()[0]['msg']})"
            ) from None
    return tasks


def _row_id(row: dict[str, Any]) -> str:
    if "instance_id" in row:
        return str(row["instance_id"])
    return r2e_gym_task(row).instance_id
