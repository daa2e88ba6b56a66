"""RL training: batches, losses, trainers, async orchestration (see DESIGN.md)."""
