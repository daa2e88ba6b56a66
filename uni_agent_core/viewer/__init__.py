"""Token-level views of a training run's sampled trajectories, for people.

A run writes each step's sampled episodes to `<run dir>/trajectories/step-NNNNNN.jsonl`
(`rl/samples.py`). This package reads those files into episodes (`steps.py`), renders one step
as one self-contained HTML page (`html.py`: every response token coloured by loss mask, chain
boundaries, rolled-back actions), writes the pages beside their step files for MLflow
(`export.py`), finds a run's step files from a run directory or an MLflow run id (`source.py`)
and serves the pages on loopback (`server.py`, `agent-rl view`).
"""
