"""Agent harnesses: white-box ReAct, any black-box CLI, mini-swe-agent (see `base.py`)."""
