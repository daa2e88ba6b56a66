"""agent-rl's library: everything that computes. It never imports prefect (docs/architecture.md,
"Layers")."""

from pathlib import Path

__version__ = "0.1.0"

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The checkout this package runs from (for an editable install, the repository): where
`make setup` puts `.agent-clis/` and `.venv-vllm/`, and whose git state a run records."""
