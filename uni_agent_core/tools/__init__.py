"""Agent tools (shell, editor, submit, finish) and tool-call parsers."""
