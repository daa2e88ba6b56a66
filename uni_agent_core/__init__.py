"""agent-rl's library: everything that computes. It never imports prefect (DESIGN.md)."""

__version__ = "0.1.0"
