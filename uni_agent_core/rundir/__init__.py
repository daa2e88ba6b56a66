"""What a run directory holds and where: its layout (`layout.py`) and its checkpoints
(`checkpoint.py`). Training writes them; evaluation, the curriculum and the flows read them."""
