"""SWE-bench-family rows (SWE-bench full/Lite/Verified, SWE-rebench) into `TaskSpec`s.

Rows keep the published schema (FAIL_TO_PASS/PASS_TO_PASS as JSON strings, `version`,
`environment_setup_commit`, ...). What a row does not say is derived as the SWE-bench harness
does: the per-instance image (`swebench/sweb.eval.x86_64.<id with __ as _1776_>:latest`), the
repository at `/testbed` in the `testbed` conda env, the log parser by repository (swebench's
`MAP_REPO_TO_PARSER_PY`), and the test command by repository over the files the test patch
touches. Rows that carry the newer harness fields (`image`/`docker_image`, `log_parser`,
`eval_script`, SWE-rebench's `install_config`) use them instead.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.harness.log_parsers.python import MAP_REPO_TO_PARSER_PY

from uni_agent_core.envs.patches import patched_files
from uni_agent_core.types import TaskSpec

WORKDIR = "/testbed"
CONDA_PREFIX = "source /opt/miniconda3/bin/activate && conda activate testbed && "
_PYTEST = "pytest --no-header -rA --tb=no -p no:cacheprovider"


def image_name(instance_id: str, namespace: str = "swebench", arch: str = "x86_64") -> str:
    """The published evaluation image of an instance (SWE-bench's naming, `__` -> `_1776_`)."""
    return f"{namespace}/sweb.eval.{arch}.{instance_id.lower().replace('__', '_1776_')}:latest"


def log_parser_for(repo: str) -> str:
    """swebench's parser for a repository's test logs (pytest for repositories it does not list)."""
    function = MAP_REPO_TO_PARSER_PY.get(repo)
    if function is None:
        return "parse_log_pytest"
    if PARSER_REGISTRY.get(function.__name__) is function:
        return function.__name__
    return next(name for name, known in PARSER_REGISTRY.items() if known is function)


def test_command(repo: str, test_patch: str, runner: str | None = None) -> str:
    """The command that runs the tests a test patch touches, as SWE-bench runs them per repo."""
    files = [f for f in patched_files(test_patch) if f.endswith(".py")]
    if repo == "django/django":
        modules = [f.removeprefix("tests/").removesuffix(".py").replace("/", ".") for f in files]
        base = runner or "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1"
        return CONDA_PREFIX + " ".join([base, *modules])
    if repo == "sympy/sympy":
        base = runner or "bin/test -C --verbose"
        return CONDA_PREFIX + " ".join([base, *map(shlex.quote, files)])
    return CONDA_PREFIX + " ".join([runner or _PYTEST, *map(shlex.quote, files)])


def _mapping(value: Any, field: str) -> dict[str, Any]:
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, dict):
        raise ValueError(f"{field} must be a mapping (or its JSON string)")
    return value


def swe_bench_task(row: dict[str, Any], variant: str = "verified") -> TaskSpec:
    """One SWE-bench row (any release) as a task."""
    repo = row["repo"]
    parser = row.get("log_parser") or log_parser_for(repo)
    test_cmd = row.get("eval_script") or test_command(repo, row.get("test_patch", ""))
    image = row.get("image") or row.get("docker_image") or image_name(row["instance_id"])
    return _task(row, image=image, test_cmd=test_cmd, parser=parser, dataset=f"swe_bench_{variant}")


def swe_rebench_task(row: dict[str, Any]) -> TaskSpec:
    """One SWE-rebench row: its `install_config` names the test command and log parser."""
    install = _mapping(row.get("install_config"), "install_config")
    runner = install.get("test_cmd")
    if isinstance(runner, list):
        runner = " && ".join(runner)
    parser = install.get("log_parser") or log_parser_for(row["repo"])
    image = (
        row.get("docker_image")
        or row.get("image_name")
        or image_name(row["instance_id"], namespace="swerebench")
    )
    test_cmd = test_command(row["repo"], row.get("test_patch", ""), runner=runner or None)
    return _task(row, image=image, test_cmd=test_cmd, parser=parser, dataset="swe_rebench")


def _task(row: dict[str, Any], *, image: str, test_cmd: str, parser: str, dataset: str) -> TaskSpec:
    return TaskSpec(
        instance_id=row["instance_id"],
        repo=row["repo"],
        base_commit=row.get("base_commit", ""),
        problem_statement=row["problem_statement"],
        patch=row.get("patch", ""),
        test_patch=row.get("test_patch", ""),
        FAIL_TO_PASS=row.get("FAIL_TO_PASS", []),
        PASS_TO_PASS=row.get("PASS_TO_PASS", []),
        version=str(row.get("version") or ""),
        source={"type": "image", "image": image, "workdir": WORKDIR, "dataset": dataset},
        test_cmd=test_cmd,
        log_parser=parser,
        difficulty=row.get("difficulty") or None,
    )
