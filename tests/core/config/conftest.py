"""Fixtures for recipe tests: the repo's recipes directory and a writer of temporary recipes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def recipes_dir() -> Path:
    """The repository's `recipes/` directory."""
    return REPO_ROOT / "recipes"


@pytest.fixture
def write_recipe(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write YAML text to `<tmp>/<name>` and return the path."""

    def write(text: str, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
