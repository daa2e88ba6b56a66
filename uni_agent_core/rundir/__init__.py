"""What a run directory holds and where: its layout (`layout.py`), its checkpoints
(`checkpoint.py`) and the rewind of its step records when a run starts (`rewind.py`). Training
writes them; evaluation, the curriculum and the flows read them."""
