"""`agent-rl gateway serve --max-total-tokens N`: the flag sets every session's capacity.

The served manager is caught where `serve` would start uvicorn; the engine is a stand-in, so
the test builds only the policy's tokenizer.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from uni_agent_core.cli.main import main


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `gateway serve` hands to `serve`, instead of serving it."""
    caught: dict[str, Any] = {}

    def fake_serve(manager: Any, **where: Any) -> None:
        caught.update(where, manager=manager)

    monkeypatch.setattr("uni_agent_core.gateway.launch.serve", fake_serve)
    monkeypatch.setattr(
        "uni_agent_core.rollout.build.build_engine",
        lambda recipe: SimpleNamespace(tokenizer=None),
    )
    return caught


def capacity(served: dict[str, Any]) -> int | None:
    return served["manager"].settings.max_total_tokens


def test_the_flag_beats_the_default_context(served: dict[str, Any]) -> None:
    # 20000 is above trainer.max_context_tokens' default (8192), which the user never gave.
    assert main(["gateway", "serve", "--model", "tiny", "--max-total-tokens", "20000"]) == 0
    assert capacity(served) == 20000


def test_the_flag_beats_the_recipe(served: dict[str, Any], tmp_path: Path) -> None:
    recipe = tmp_path / "serve.yaml"
    recipe.write_text("name: serve\ngateway:\n  max_total_tokens: 1024\n", encoding="utf-8")
    argv = ["gateway", "serve", "--recipe", str(recipe), "--max-total-tokens", "2048"]
    assert main(argv) == 0
    assert capacity(served) == 2048


def test_without_the_flag_the_capacity_is_the_context(served: dict[str, Any]) -> None:
    assert main(["gateway", "serve", "--model", "tiny"]) == 0
    assert capacity(served) == 8192


def test_a_flag_above_an_explicit_context_is_refused(
    served: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "serve.yaml"
    recipe.write_text("name: serve\ntrainer:\n  max_context_tokens: 4096\n", encoding="utf-8")
    argv = ["gateway", "serve", "--recipe", str(recipe), "--max-total-tokens", "8000"]
    assert main(argv) == 2
    assert "manager" not in served
    err = capsys.readouterr().err
    assert "gateway.max_total_tokens: 8000 exceeds trainer.max_context_tokens (4096)" in err
