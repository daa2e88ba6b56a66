"""Prompts of the ReAct harness (a task's own `prompt` overrides the task template)."""

from __future__ import annotations

from uni_agent_core.types import TaskSpec

SYSTEM_PROMPT = (
    "You are a software engineering agent working in a repository. Use the tools to inspect "
    "files, run commands and edit code. Make the smallest change that resolves the issue, "
    "check it, then call `submit`."
)

TASK_TEMPLATE = (
    "The repository is at {workdir}. Resolve this issue:\n\n<issue>\n{problem}\n</issue>\n\n"
    "Act with tool calls only; call `submit` when you are done."
)


def task_prompt(task: TaskSpec, workdir: str) -> str:
    """The first user message of an episode."""
    if task.prompt:
        return task.prompt.format(workdir=workdir, problem=task.problem_statement)
    return TASK_TEMPLATE.format(workdir=workdir, problem=task.problem_statement)
