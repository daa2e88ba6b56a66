"""The tools that end an episode: `submit` (the working tree is the answer) and `finish`.

Neither touches the sandbox: the reward is computed later, in a fresh sandbox, from the agent's
diff (docs/architecture.md, "Tasks and rewards"). The harness maps `submit` to
`ExitReason.SUBMITTED` and `finish` to `ExitReason.FINISHED`.
"""

from __future__ import annotations

from pydantic import Field

from uni_agent_core.sandbox.base import Sandbox
from uni_agent_core.tools.registry import Tool, ToolArgs, ToolResult


class SubmitArgs(ToolArgs):
    """`submit` takes no arguments."""


class SubmitTool(Tool[SubmitArgs]):
    """End the episode; the repository's working-tree changes are the submission."""

    name = "submit"
    description = (
        "Submit your changes and end the task. Call it once the fix is complete; the current "
        "state of the repository's files is graded."
    )
    args_model = SubmitArgs

    async def run(self, sandbox: Sandbox, args: SubmitArgs) -> ToolResult:
        """End the episode.

        Args:
            sandbox: unused; the diff is taken by the harness.
            args: no fields.

        Returns:
            `ToolResult(output="submitted", done=True)`.
        """
        return ToolResult(output="submitted", done=True)


class FinishArgs(ToolArgs):
    """Arguments of `finish`."""

    message: str = Field(min_length=1)
    """The final answer or summary for the user."""


class FinishTool(Tool[FinishArgs]):
    """End the episode with a final message (tasks whose answer is text, not a patch)."""

    name = "finish"
    description = "End the task with a final message: your answer or a summary of what you did."
    args_model = FinishArgs

    async def run(self, sandbox: Sandbox, args: FinishArgs) -> ToolResult:
        """End the episode with `args.message` as the output.

        Args:
            sandbox: unused.
            args: the final message.

        Returns:
            `ToolResult(output=args.message, done=True)`.
        """
        return ToolResult(output=args.message, done=True)
