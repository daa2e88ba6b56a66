"""Simulators of whole training systems (no model runs): `async_rl.py` replays the sync,
colocated-async and separate-async training modes on simulated replicas and trainer
(`bench/async_modes.py`, `bench/async_cluster.py`)."""
