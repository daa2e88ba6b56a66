"""`docs/extending.md`'s Python snippets stand on their own: each parses, and every name it uses
is imported or defined in it (issue 49, finding 7: copied as written, they must run)."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[3] / "docs" / "extending.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def undefined_names(source: str) -> set[str]:
    """Names a module-level snippet loads that it never binds (imports, definitions,
    assignments, arguments, comprehension and loop targets) and Python does not provide."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    loaded: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
    return loaded - bound


def test_the_guide_has_its_snippets() -> None:
    assert len(SNIPPETS) >= 5


def _file_named(snippet: str) -> str:
    """The snippet's first line names its file (`# my_plugins/one_shot.py`)."""
    return snippet.splitlines()[0].lstrip("# ").split(":")[0]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=_file_named)
def test_each_snippet_imports_or_defines_every_name_it_uses(snippet: str) -> None:
    assert undefined_names(snippet) == set()


def test_the_check_finds_a_missing_import() -> None:
    assert undefined_names("def f(x):\n    return torch.exp(x) + y\n") == {"torch", "y"}
