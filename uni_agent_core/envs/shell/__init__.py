"""Shell tasks in the style of Terminal-Bench: starting files in a working directory, an
instruction, and a hidden check script that inspects the final state (`generator.py` makes
them, keyed; `environment.py` runs them; `checks.py` owns the check scripts' format)."""
