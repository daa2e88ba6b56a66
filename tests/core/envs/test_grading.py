"""Grading logs with swebench's parsers into FAIL_TO_PASS / PASS_TO_PASS reports and rewards."""

import pytest

from uni_agent_core.config.reward import PartialCreditRewardConfig, ResolvedRewardConfig
from uni_agent_core.envs.grading import framed_log, grade_log, parser_name
from uni_agent_core.envs.rewards import reward_from_report
from uni_agent_core.types import TaskSpec

PYTEST_LOG = """\
============================= test session starts ==============================
collected 4 items

tests/test_units.py ..F.                                                 [100%]
=========================== short test summary info ============================
PASSED tests/test_units.py::test_parse
PASSED tests/test_units.py::test_convert[meters]
FAILED tests/test_units.py::test_round_trip - AssertionError: 3 != 4
PASSED tests/test_units.py::test_format
========================= 1 failed, 3 passed in 0.12s ==========================
"""

DJANGO_LOG = """\
Testing against Django installed in '/testbed/django'
Creating test database for alias 'default'...
test_blank_in_choices (model_fields.tests.GetChoicesTests) ... ok
test_empty_choices (model_fields.tests.GetChoicesTests) ... ok
test_get_FIELD_display_translated (model_fields.tests.GetFieldDisplayTests)
A translated display value is coerced to str. ... ok
test_overriding_FIELD_display (model_fields.tests.GetFieldDisplayTests) ... FAIL

======================================================================
FAIL: test_overriding_FIELD_display (model_fields.tests.GetFieldDisplayTests)
----------------------------------------------------------------------
AssertionError: 'foo' != 'something'

----------------------------------------------------------------------
Ran 4 tests in 0.004s

FAILED (failures=1)
"""


def _task(parser: str, f2p: list[str], p2p: list[str], repo: str = "org/repo") -> TaskSpec:
    return TaskSpec(
        instance_id="x__y-1",
        repo=repo,
        problem_statement="p",
        FAIL_TO_PASS=f2p,
        PASS_TO_PASS=p2p,
        log_parser=parser,
    )


def test_pytest_log_graded_with_swebench_parser() -> None:
    task = _task(
        "parse_log_pytest",
        ["tests/test_units.py::test_round_trip"],
        ["tests/test_units.py::test_parse", "tests/test_units.py::test_convert[meters]"],
    )
    report = grade_log(task, framed_log(PYTEST_LOG, exit_code=1))
    assert report.log_valid
    assert report.fail_to_pass_failed == ["tests/test_units.py::test_round_trip"]
    assert len(report.pass_to_pass_passed) == 2 and not report.resolved
    passing = _task("pytest", ["tests/test_units.py::test_format"], task.PASS_TO_PASS)
    assert grade_log(passing, framed_log(PYTEST_LOG, exit_code=1)).resolved


def test_django_log_graded_with_swebench_parser() -> None:
    fixed = _task(
        "parse_log_django",
        # A test with a docstring is named by its docstring, as SWE-bench's django rows are.
        ["A translated display value is coerced to str."],
        ["test_blank_in_choices (model_fields.tests.GetChoicesTests)"],
        repo="django/django",
    )
    assert grade_log(fixed, framed_log(DJANGO_LOG, exit_code=1)).resolved
    broken = fixed.model_copy(
        update={
            "FAIL_TO_PASS": [
                "test_overriding_FIELD_display (model_fields.tests.GetFieldDisplayTests)"
            ]
        }
    )
    report = grade_log(broken, framed_log(DJANGO_LOG, exit_code=1))
    assert not report.resolved and report.fail_to_pass_failed


def test_unittest_keys_from_older_pythons_are_canonical() -> None:
    name = "test_clamp_issue_1 (tests.test_core.TestCore.test_clamp_issue_1)"
    old = "test_clamp_issue_1 (tests.test_core.TestCore) ... ok\n\nRan 1 test\n\nOK\n"
    new = f"{name} ... ok\n\nRan 1 test\n\nOK\n"
    task = _task("unittest", [name], [])
    assert grade_log(task, framed_log(old, 0)).resolved
    assert grade_log(task, framed_log(new, 0)).resolved


def test_a_log_without_results_is_refused_and_scores_nothing() -> None:
    task = _task("pytest", ["tests/t.py::test_a"], [])
    report = grade_log(task, framed_log("ImportError: no module named foo", exit_code=2))
    assert not report.log_valid and not report.resolved
    assert report.fail_to_pass_failed == ["tests/t.py::test_a"]


def test_passed_lines_printed_by_a_failing_run_are_not_believed() -> None:
    """A patch printing its own PASSED lines while the test command fails is not resolved."""
    task = _task("pytest", ["tests/t.py::test_a"], [])
    forged = "PASSED tests/t.py::test_a\n"
    assert not grade_log(task, framed_log(forged, exit_code=1)).resolved
    assert grade_log(task, framed_log(forged, exit_code=0)).resolved


def test_unknown_parser_names_the_choices() -> None:
    with pytest.raises(ValueError, match="unknown log_parser 'nose'.*pytest"):
        parser_name("nose")


def test_rewards_binary_and_partial_credit() -> None:
    task = _task("pytest", ["tests/t.py::test_a", "tests/t.py::test_b"], ["tests/t.py::test_c"])
    half = framed_log(
        "PASSED tests/t.py::test_a\nFAILED tests/t.py::test_b\nPASSED tests/t.py::test_c\n", 1
    )
    broken = framed_log(
        "PASSED tests/t.py::test_a\nPASSED tests/t.py::test_b\nFAILED tests/t.py::test_c\n", 1
    )
    half_report, broken_report = grade_log(task, half), grade_log(task, broken)
    assert reward_from_report(half_report, ResolvedRewardConfig()) == 0.0
    assert reward_from_report(half_report, PartialCreditRewardConfig()) == 0.5
    assert reward_from_report(broken_report, PartialCreditRewardConfig()) == 0.0
    lenient = PartialCreditRewardConfig(require_pass_to_pass=False)
    assert reward_from_report(broken_report, lenient) == 1.0
