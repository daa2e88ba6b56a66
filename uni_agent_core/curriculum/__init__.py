"""Curriculum: task validation, pass-rate history, difficulty estimation and dynamic sampling."""
