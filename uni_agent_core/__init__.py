"""agent-rl's library: everything that computes. It never imports prefect (docs/architecture.md,
"Layers")."""

__version__ = "0.1.0"
