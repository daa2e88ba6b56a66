"""`agent-rl data generate | validate | oracle` end to end on a small suite."""

import json
import shutil

from uni_agent_core.cli import main

ISOLATION = "bubblewrap" if shutil.which("bwrap") else "none"


def test_generate_validate_and_oracle(tmp_path, capsys) -> None:
    out = tmp_path / "suite"
    assert (
        main(["data", "generate", "micro-swe", "--n", "8", "--seed", "0", "--out", str(out)]) == 0
    )
    assert "wrote 8 micro-swe tasks" in capsys.readouterr().out
    assert (out / "tasks.jsonl").is_file() and len(list((out / "repos").iterdir())) == 8

    assert main(["data", "validate", str(out), "--isolation", ISOLATION]) == 0
    captured = capsys.readouterr()
    assert "8/8 valid (100.0%)" in captured.out
    assert "[validate 8/8]" in captured.err
    report = json.loads((out / "validation.json").read_text())
    assert report["by_difficulty"] == {
        level: {"total": 2, "valid": 2} for level in ("L0", "L1", "L2", "L3")
    }

    held = tmp_path / "heldout"
    main(
        [
            "data",
            "generate",
            "micro-swe",
            "--n",
            "4",
            "--seed",
            "0",
            "--split",
            "heldout",
            "--out",
            str(held),
        ]
    )
    assert main(["data", "oracle", str(held), "--isolation", ISOLATION]) == 0
    assert "oracle: 4/4 resolved (100.0%)" in capsys.readouterr().out


def test_unreadable_input_exits_non_zero(tmp_path, capsys) -> None:
    bad = tmp_path / "tasks.jsonl"
    bad.write_text("{oops\n")
    assert main(["data", "validate", str(bad)]) == 2
    assert "cannot read tasks" in capsys.readouterr().err
    assert main(["data", "validate", str(tmp_path / "absent.jsonl")]) == 2
