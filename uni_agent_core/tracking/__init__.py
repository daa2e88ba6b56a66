"""Experiment tracking: MLflow runs of training, evaluation and curriculum refresh."""
