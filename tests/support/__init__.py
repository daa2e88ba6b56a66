"""Shared test doubles and helpers (importable from every test: see `pythonpath`)."""
