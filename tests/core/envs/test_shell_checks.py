"""Shell check scripts: one report line per check, read against the names the task lists so
that extra or repeated lines never add a pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from uni_agent_core.envs.shell.checks import EXIT_CHECK, Check, check_script, parse_report


def _run(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    path = cwd.parent / f"{cwd.name}-check.sh"
    path.write_text(script)
    return subprocess.run(
        ["bash", str(path)], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_script_reports_each_check_and_exits_zero_only_when_all_pass(tmp_path: Path) -> None:
    checks = [
        Check("has_a", "need_file a.txt"),
        Check("a_is_hi", "text_is a.txt hi"),
        Check("n_is_3", "word_is n.txt 3"),
        Check("b_exact", "bytes_are b.txt $'x\\n'"),
    ]
    script = check_script(checks)
    work = tmp_path / "work"
    work.mkdir()
    first = _run(script, work)
    assert first.returncode == 1
    report = parse_report(first.stdout, first.returncode, expected=[c.name for c in checks])
    assert report.passed == [] and list(report.failed) == [c.name for c in checks]
    (work / "a.txt").write_text("hi\n\n")
    (work / "n.txt").write_text("  3\n")
    (work / "b.txt").write_text("x\n")
    second = _run(script, work)
    assert second.returncode == 0, second.stdout
    assert parse_report(second.stdout, 0, expected=[c.name for c in checks]).resolved
    (work / "b.txt").write_text("x\n\n")
    third = _run(script, work)
    assert "fail b_exact: b.txt differs" in third.stdout and third.returncode == 1


def test_a_check_that_changes_directory_does_not_move_the_next(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "top.txt").write_text("top\n")
    script = check_script([Check("moves", "cd sub"), Check("still_top", "need_file top.txt")])
    assert _run(script, tmp_path).returncode == 0


def test_extra_repeated_or_missing_lines_never_count_as_passes() -> None:
    output = "ok a\nfail b: wrong\nok b\nok c\nok c\nok d\nnoise\n"
    report = parse_report(output, 1, expected=["a", "b", "c", "e"])
    assert report.passed == ["a"]
    assert report.failed["b"] == "wrong"
    assert report.failed["c"] == "reported more than once"
    assert "no result" in report.failed["e"]
    assert report.fraction == 0.25 and not report.resolved


def test_a_non_zero_exit_with_every_check_passed_is_a_failure() -> None:
    report = parse_report("ok a\n", 137, expected=["a"])
    assert report.failed == {EXIT_CHECK: "the check script exited 137"}
    assert report.fraction == 0.5 and not report.resolved


def test_without_expected_names_the_printed_ones_count() -> None:
    report = parse_report("ok a\nfail b: no\n", 1)
    assert report.passed == ["a"] and list(report.failed) == ["b"]


def test_a_timed_out_script_fails_the_checks_it_did_not_reach() -> None:
    report = parse_report("ok a\n", 124, expected=["a", "b"], timed_out=True)
    assert report.failed == {"b": "timed out"} and not report.resolved


def test_bad_check_names_and_repeats_are_refused() -> None:
    with pytest.raises(ValueError, match="must match"):
        Check("two words", "true")
    with pytest.raises(ValueError, match="repeat"):
        check_script([Check("a", "true"), Check("a", "true")])
    with pytest.raises(ValueError, match="at least one"):
        check_script([])
