"""Checkpoint evaluation: suites, resumable runs through the training rollout stack, avg@k and
pass@k reports, and the paired before -> after comparison of two evaluations."""
