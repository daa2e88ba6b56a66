"""Rendering a planned micro-swe repository: its files at the base commit, the fixed files, and
the test file with the hidden tests added.

A repository is a small package (`<package>/<module>.py`, two or three functions per module)
with a visible unittest suite (`tests/test_<module>.py`). Planted bugs live in the package; the
hidden tests are extra methods of the visible test classes, so the test patch edits files the
agent can see (as in SWE-bench) and the verifier must restore them before applying it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from uni_agent_core.envs.micro_swe.catalog import Args, Mutation, Template

TEST_COMMAND = "python3 -B -m unittest discover -v -s tests -t ."
"""Runs every test module; `-B` keeps `__pycache__` out of the working tree."""

GITIGNORE = "__pycache__/\n*.pyc\n"


@dataclass(frozen=True)
class TestCase:
    """One generated test method: `assertEqual(function(*args), expected)`."""

    method: str
    function: str
    args: Args
    expected: Any


@dataclass
class PlannedFunction:
    """A function of the repository; `mutation` is None when it is correct."""

    template: Template
    name: str
    mutation: Mutation | None = None
    visible: list[TestCase] = field(default_factory=list)
    hidden_failing: list[TestCase] = field(default_factory=list)
    hidden_passing: list[TestCase] = field(default_factory=list)

    def source(self, *, fixed: bool) -> str:
        if self.mutation is None or fixed:
            return self.template.source(self.name)
        return self.template.buggy_source(self.name, self.mutation)

    def case(self, method: str, args: Args) -> TestCase:
        return TestCase(method, self.name, args, self.template.function(*args))


@dataclass
class PlannedModule:
    """One module of the package and its test class."""

    name: str
    functions: list[PlannedFunction]

    @property
    def test_class(self) -> str:
        return "Test" + "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def has_bug(self) -> bool:
        return any(function.mutation is not None for function in self.functions)


@dataclass
class PlannedRepo:
    """A whole repository: its package name and modules."""

    package: str
    modules: list[PlannedModule]

    def module_path(self, module: PlannedModule) -> str:
        return f"{self.package}/{module.name}.py"

    def test_path(self, module: PlannedModule) -> str:
        return f"tests/test_{module.name}.py"

    def test_module(self, module: PlannedModule) -> str:
        return f"tests.test_{module.name}"


def add_cases(function: PlannedFunction, rng: random.Random) -> None:
    """Fill a function's visible and hidden tests from its mutation's case generators (or, for a
    correct function, from its template's first mutation: every case then passes)."""
    base = function.name
    if function.mutation is None:
        mutation = function.template.mutations[0]
        cases = mutation.safe(rng) + mutation.triggers(rng)
        function.visible = [function.case(f"test_{base}_{i}", a) for i, a in enumerate(cases, 1)]
        return
    safe = function.mutation.safe(rng)
    function.visible = [function.case(f"test_{base}_{i}", a) for i, a in enumerate(safe, 1)]
    triggers = function.mutation.triggers(rng)
    function.hidden_failing = [
        function.case(f"test_{base}_issue_{i}", args) for i, args in enumerate(triggers, 1)
    ]
    extra = function.mutation.safe(rng)[:1]
    function.hidden_passing = [
        function.case(f"test_{base}_extra_{i}", a) for i, a in enumerate(extra, 1)
    ]


def render_module(repo: PlannedRepo, module: PlannedModule, *, fixed: bool) -> str:
    functions = "\n\n".join(function.source(fixed=fixed) for function in module.functions)
    title = module.name.replace("_", " ")
    return f'"""{title.capitalize()} helpers of {repo.package}."""\n\n\n{functions}'


def render_tests(repo: PlannedRepo, module: PlannedModule, *, hidden: bool) -> str:
    names = ", ".join(function.name for function in module.functions)
    lines = [
        "import unittest",
        "",
        f"from {repo.package}.{module.name} import {names}",
        "",
        "",
        f"class {module.test_class}(unittest.TestCase):",
    ]
    cases = [case for function in module.functions for case in function.visible]
    if hidden:
        cases += [
            case
            for function in module.functions
            for case in (*function.hidden_failing, *function.hidden_passing)
        ]
    for index, case in enumerate(cases):
        if index:
            lines.append("")
        args = ", ".join(repr(arg) for arg in case.args)
        lines += [
            f"    def {case.method}(self):",
            f"        self.assertEqual({case.function}({args}), {case.expected!r})",
        ]
    lines += ["", "", 'if __name__ == "__main__":', "    unittest.main()", ""]
    return "\n".join(lines)


def base_files(repo: PlannedRepo) -> dict[str, str]:
    """Every file of the repository at its base commit (bugs in, hidden tests out)."""
    files = {
        ".gitignore": GITIGNORE,
        "README.md": (
            f"# {repo.package}\n\nA small utility library.\n\n"
            f"Run the tests with:\n\n    {TEST_COMMAND}\n"
        ),
        f"{repo.package}/__init__.py": f'"""The {repo.package} package."""\n',
        "tests/__init__.py": "",
    }
    for module in repo.modules:
        files[repo.module_path(module)] = render_module(repo, module, fixed=False)
        files[repo.test_path(module)] = render_tests(repo, module, hidden=False)
    return files


def fixed_files(repo: PlannedRepo) -> dict[str, str]:
    """The package files the gold patch changes, as they are after it."""
    return {
        repo.module_path(module): render_module(repo, module, fixed=True)
        for module in repo.modules
        if module.has_bug
    }


def hidden_test_files(repo: PlannedRepo) -> dict[str, str]:
    """The test files the test patch changes, as they are after it."""
    return {
        repo.test_path(module): render_tests(repo, module, hidden=True)
        for module in repo.modules
        if module.has_bug
    }


def unittest_id(repo: PlannedRepo, module: PlannedModule, case: TestCase) -> str:
    """The test's name as `python -m unittest -v` prints it (Python 3.11+ form)."""
    dotted = f"{repo.test_module(module)}.{module.test_class}.{case.method}"
    return f"{case.method} ({dotted})"
