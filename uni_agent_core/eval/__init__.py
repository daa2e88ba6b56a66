"""Checkpoint evaluation: suites, resumable runs through the training rollout stack, avg@k and
pass@k reports."""
