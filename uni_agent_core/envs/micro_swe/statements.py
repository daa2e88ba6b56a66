"""Problem statements of micro-swe tasks, one writer per difficulty level.

L0 names the file, the line and the fix; L1 the function and the symptom with an example; L2
only the failing behaviour with an example (the agent must find the code); L3 two such
behaviours whose bugs sit in two different files. No statement contains the gold patch.
"""

from __future__ import annotations

import difflib

from uni_agent_core.envs.micro_swe.repo import PlannedFunction, PlannedModule, PlannedRepo

_CLOSING = "Please fix the library so that it behaves as described. Do not modify the tests."


def _example(function: PlannedFunction) -> tuple[str, str]:
    case = function.hidden_failing[0]
    return ", ".join(repr(arg) for arg in case.args), repr(case.expected)


def _bug_line(repo: PlannedRepo, module: PlannedModule, function: PlannedFunction) -> int:
    """1-based line of the module (as shipped, with the bug) where the fix goes."""
    from uni_agent_core.envs.micro_swe.repo import render_module

    buggy = render_module(repo, module, fixed=False).splitlines()
    fixed = render_module(repo, module, fixed=True).splitlines()
    matcher = difflib.SequenceMatcher(a=buggy, b=fixed, autojunk=False)
    for tag, start, _, _, _ in matcher.get_opcodes():
        if tag != "equal":
            return start + 1
    raise ValueError(f"{function.name}: the mutation changes nothing")


def level0(repo: PlannedRepo, module: PlannedModule, function: PlannedFunction) -> str:
    mutation = function.mutation
    assert mutation is not None
    path, line = repo.module_path(module), _bug_line(repo, module, function)
    wrong, right = mutation.replace.strip(), mutation.find.strip()
    if wrong:
        fix = f"`{wrong}` is wrong there; it should be `{right}`."
    else:
        fix = f"the statement `{right}` is missing just before it."
    return f"In `{path}`, line {line} (in function `{function.name}`): {fix}\n\n{_CLOSING}\n"


def level1(repo: PlannedRepo, module: PlannedModule, function: PlannedFunction) -> str:
    mutation = function.mutation
    assert mutation is not None
    args, expected = _example(function)
    return (
        f"`{function.name}` in `{repo.package}.{module.name}` gives wrong results for "
        f"{mutation.symptom}. For example, `{function.name}({args})` should return "
        f"`{expected}`.\n\n{_CLOSING}\n"
    )


def _behaviour(repo: PlannedRepo, function: PlannedFunction) -> str:
    mutation = function.mutation
    assert mutation is not None
    args, expected = _example(function)
    what = function.template.behaviour
    return (
        f"{what[0].upper()}{what[1:]} with {repo.package} gives wrong results for "
        f"{mutation.symptom}: for the arguments `{args}` the result should be `{expected}`."
    )


def level2(repo: PlannedRepo, module: PlannedModule, function: PlannedFunction) -> str:
    del module
    return f"{_behaviour(repo, function)}\n\n{_CLOSING}\n"


def level3(repo: PlannedRepo, bugs: list[tuple[PlannedModule, PlannedFunction]]) -> str:
    items = "\n".join(f"{i}. {_behaviour(repo, f)}" for i, (_, f) in enumerate(bugs, 1))
    return f"Users reported {len(bugs)} problems:\n\n{items}\n\n{_CLOSING}\n"
