"""Sandboxes: isolated workspaces where agents act and tests run (see `base.py`)."""
