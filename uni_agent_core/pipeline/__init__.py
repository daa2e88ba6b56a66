"""The training pipeline, defined once: validate data -> warm start -> estimate difficulty ->
evaluate the starting policy -> train -> evaluate the checkpoints -> log to MLflow
(docs/architecture.md, "The two paths").

`run.py` sequences the stages over a `Stages` implementation (`stages.py`): `DirectStages` runs
them in this process (`agent-rl train`); the Prefect flow `agent-rl/train` runs the same
sequence with stages that are Prefect tasks. Each stage returns a typed result (`results.py`).
"""
