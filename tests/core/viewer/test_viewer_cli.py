"""`agent-rl view` writes a step's page with `--out`, and a missing run directory, trajectories
or step, a malformed step file or a missing MLflow store is one `error:` line and exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.cli.main import main


def test_out_writes_the_newest_step_by_default(run_dir: Path, tmp_path: Path, capsys, parse_page):
    out = tmp_path / "pages" / "view.html"
    assert main(["view", str(run_dir), "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"step 2 of run-a: {out}"
    page = parse_page(out.read_text(encoding="utf-8"))
    assert page.by_tag("h1")[0].text() == "run-a — step 2"


def test_out_with_a_step_and_trace_links(run_dir: Path, tmp_path: Path, capsys, parse_page):
    out = tmp_path / "one.html"
    argv = ["view", str(run_dir), "--step", "1", "--out", str(out), "--mlflow-ui", "http://ui:5000"]
    assert main([*argv, "--experiment-id", "3"]) == 0
    page = parse_page(out.read_text(encoding="utf-8"))
    assert len(page.by_class("chain")) == 4
    hrefs = {a.attrs["href"] for a in page.by_class("trace-link")}
    assert hrefs == {"http://ui:5000/#/experiments/3/traces?selectedEvaluationId=tr-abc%201"}
    assert main(argv) == 0  # a run directory without --experiment-id: no links, a note
    assert "no trace links" in capsys.readouterr().out
    assert parse_page(out.read_text(encoding="utf-8")).by_class("trace-link") == []


def test_the_trajectories_directory_itself_is_accepted(run_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "t.html"
    assert main(["view", str(run_dir / "trajectories"), "--out", str(out), "--step", "1"]) == 0
    assert "step 1 of run-a" in capsys.readouterr().out


def errors_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()


def test_a_missing_run_directory_is_an_error_line(tmp_path: Path, capsys):
    [line] = errors_of(["view", str(tmp_path / "nope"), "--out", "x.html"], capsys)
    assert line == f"error: no run directory at {tmp_path / 'nope'} " + (
        "(give a run directory or an MLflow run id)"
    )


def test_a_run_directory_without_trajectories_is_an_error_line(tmp_path: Path, capsys):
    [line] = errors_of(["view", str(tmp_path)], capsys)
    assert line.startswith(f"error: no trajectories in {tmp_path}: expected ")


def test_an_unknown_step_is_an_error_line(run_dir: Path, tmp_path: Path, capsys):
    argv = ["view", str(run_dir), "--step", "7", "--out", str(tmp_path / "x.html")]
    [line] = errors_of(argv, capsys)
    assert line.startswith("error: no step 7 in ") and line.endswith("(steps: 1, 2)")
    assert not (tmp_path / "x.html").exists()
    [line] = errors_of(["view", str(run_dir), "--step", "7"], capsys)  # serving checks it too
    assert line.startswith("error: no step 7 in ")


def test_a_malformed_step_file_is_an_error_line(run_dir: Path, tmp_path: Path, capsys):
    (run_dir / "trajectories" / "step-000005.jsonl").write_text('{"task_id": "t"}\n')
    [line] = errors_of(["view", str(run_dir), "--out", str(tmp_path / "x.html")], capsys)
    assert line.endswith("step-000005.jsonl:1: missing field 'sample_index'")


def test_a_run_id_without_a_store_is_an_error_line(tmp_path: Path, capsys):
    uri = f"sqlite:///{tmp_path}/absent.db"
    [line] = errors_of(["view", "0123abcd", "--tracking-uri", uri], capsys)
    assert line.startswith(f"error: no MLflow store at {tmp_path}/absent.db")
    assert not (tmp_path / "absent.db").exists()


def test_a_bad_port_is_an_error_line(run_dir: Path, capsys):
    [line] = errors_of(["view", str(run_dir), "--port", "70000"], capsys)
    assert line.startswith("error: --port 70000 is not a port")
