"""RL training: losses, trainers, the step loop, training runs, warm start and verl
(docs/architecture.md, "The two paths")."""
