"""The base classes of every exception `uni_agent_core` defines, and which ones are the user's.

`AgentRLError` is the root: each project exception derives from it and keeps its builtin base
too (`class RecipeError(UserError, ValueError)`), so `except ValueError` around a call still
catches what it caught before. `UserError` marks the mistakes a user fixes: a bad recipe or flag,
a missing or unreadable file they named, task data that cannot be read, a model or tool not
prepared on this host. The command line (`cli/main.py`) prints a `UserError` as `error: ...`
lines and exits 2; any other exception is a bug or a failed run and keeps its traceback.

This module imports nothing of the package, so every layer may import it.
"""

from __future__ import annotations


class AgentRLError(Exception):
    """Base of every exception class the project defines."""


class UserError(AgentRLError):
    """A mistake the user fixes; its message says what is wrong and how to fix it.

    The command line prints each line of the message as `error: <line>` on stderr, with no
    traceback, and exits 2.
    """
