"""The `agent-rl` command line: argument parsing and error reporting (`main.py`), recipes checked
against this host (`recipes.py`), and the commands' glue, one module per command group
(`data.py`, `curriculum.py`, `eval.py`). No logic of the library lives here: each command loads a
recipe, calls the library, and prints what it did."""

from uni_agent_core.cli.main import main

__all__ = ["main"]
