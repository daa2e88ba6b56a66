"""Tasks and rewards: task sources (SWE-bench, SWE-rebench, R2E-Gym, the micro-swe generator),
the agent's workspace, data validation, the fresh-sandbox verifier and its grading, the leak
auditor."""
