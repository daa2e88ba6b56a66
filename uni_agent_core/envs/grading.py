"""Grading test logs into FAIL_TO_PASS / PASS_TO_PASS reports with swebench's own parsers.

A log is graded exactly as the SWE-bench harness grades it: `swebench.harness.grading.
get_logs_eval` parses the section between the start/end markers with the task's parser from
swebench's `PARSER_REGISTRY` (and refuses logs whose test command failed without reporting a
failure), then `get_eval_tests_report` and `get_resolution_status` decide the outcome. Task
rows name parsers by their registry name (`parse_log_pytest`) or by a short alias (`pytest`,
`django`, `unittest`, `r2e_gym`).

Two normalisations are ours, both on status-map keys only: `unittest` keys printed by Python
< 3.11 (`test_x (pkg.TestC)`) get the 3.11+ form (`test_x (pkg.TestC.test_x)`) that micro-swe
rows use, and `r2e_gym` keys (`r2e_tests/test_1.py::TestC::test_x`) become R2E-Gym's
`TestC.test_x`.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field
from swebench.harness.constants import (
    END_TEST_OUTPUT,
    FAIL_TO_PASS,
    PASS_TO_PASS,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    ResolvedStatus,
)
from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.types import TestSpec

from uni_agent_core.types import TaskSpec

PARSER_ALIASES: dict[str, str] = {
    "pytest": "parse_log_pytest",
    "pytest_options": "parse_log_pytest_options",
    "pytest_v2": "parse_log_pytest_v2",
    "django": "parse_log_django",
    "unittest": "parse_log_django",
    "sympy": "parse_log_sympy",
    "r2e_gym": "parse_log_pytest",
}
"""Short parser names accepted in task rows, and the swebench parser each stands for."""

_OLD_UNITTEST_KEY = re.compile(r"^(?P<method>\w+) \((?P<dotted>[\w.]+)\)$")


class TestReport(BaseModel):
    """Which FAIL_TO_PASS and PASS_TO_PASS tests passed in one graded log."""

    model_config = ConfigDict(extra="forbid")

    fail_to_pass_passed: list[str] = Field(default_factory=list)
    fail_to_pass_failed: list[str] = Field(default_factory=list)
    pass_to_pass_passed: list[str] = Field(default_factory=list)
    pass_to_pass_failed: list[str] = Field(default_factory=list)
    log_valid: bool = True
    """False when swebench refused the log (no test output, or a failing exit code with no
    failing test); every test then counts as failed."""
    status: str = ResolvedStatus.NO.value
    """swebench's resolution status: RESOLVED_FULL, RESOLVED_PARTIAL or RESOLVED_NO."""
    statuses: dict[str, str] = Field(default_factory=dict)
    """The parsed status of every test the log mentions."""

    @property
    def resolved(self) -> bool:
        return self.status == ResolvedStatus.FULL.value

    @property
    def fail_to_pass_rate(self) -> float:
        total = len(self.fail_to_pass_passed) + len(self.fail_to_pass_failed)
        return len(self.fail_to_pass_passed) / total if total else 1.0

    @property
    def pass_to_pass_rate(self) -> float:
        total = len(self.pass_to_pass_passed) + len(self.pass_to_pass_failed)
        return len(self.pass_to_pass_passed) / total if total else 1.0


def parser_name(name: str) -> str:
    """The swebench registry name of a task's `log_parser`.

    Raises:
        ValueError: neither an alias nor a registry name; the message lists the aliases.
    """
    resolved = PARSER_ALIASES.get(name, name)
    if resolved not in PARSER_REGISTRY:
        raise ValueError(
            f"unknown log_parser {name!r}; use one of {sorted(PARSER_ALIASES)} or a swebench "
            f"parser name such as 'parse_log_pytest'"
        )
    return resolved


def framed_log(output: str, exit_code: int) -> str:
    """A test run's output between swebench's markers, with the exit code after them."""
    return f"{START_TEST_OUTPUT}\n{output}\n{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: {exit_code}\n"


def _normalizer(alias: str) -> Callable[[str], str]:
    if alias == "unittest":
        return _canonical_unittest_key
    if alias == "r2e_gym":
        return _r2e_gym_key
    return lambda key: key


def _canonical_unittest_key(key: str) -> str:
    match = _OLD_UNITTEST_KEY.match(key)
    if match and not match["dotted"].endswith("." + match["method"]):
        return f"{match['method']} ({match['dotted']}.{match['method']})"
    return key


def _r2e_gym_key(key: str) -> str:
    parts = key.split("::")
    return ".".join(parts[1:]) if len(parts) > 1 else key


def status_map(task: TaskSpec, log: str) -> tuple[dict[str, str], bool]:
    """The parsed test statuses of a framed log, and whether swebench accepted the log."""
    spec = TestSpec(
        instance_id=task.instance_id,
        image="",
        eval_script_list=[],
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=parser_name(task.log_parser),
    )
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as handle:
        handle.write(log)
        handle.flush()
        statuses, valid = get_logs_eval(spec, handle.name)
    normalize = _normalizer(task.log_parser)
    return {normalize(key): value for key, value in statuses.items()}, valid


def grade_log(task: TaskSpec, log: str) -> TestReport:
    """Grade a framed test log (see `framed_log`) against the task's test lists."""
    statuses, valid = status_map(task, log)
    gold = {FAIL_TO_PASS: task.FAIL_TO_PASS, PASS_TO_PASS: task.PASS_TO_PASS}
    report = get_eval_tests_report(statuses, gold)
    return TestReport(
        fail_to_pass_passed=report[FAIL_TO_PASS]["success"],
        fail_to_pass_failed=report[FAIL_TO_PASS]["failure"],
        pass_to_pass_passed=report[PASS_TO_PASS]["success"],
        pass_to_pass_failed=report[PASS_TO_PASS]["failure"],
        log_valid=valid,
        status=get_resolution_status(report),
        statuses=statuses,
    )
