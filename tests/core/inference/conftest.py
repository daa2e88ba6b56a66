"""Shared engine fixtures: one loaded policy per model for the whole module."""

from __future__ import annotations

import pytest

from uni_agent_core.models import load_policy


@pytest.fixture(scope="session")
def tiny_policy():
    return load_policy("tiny")


@pytest.fixture(scope="session")
def smollm2_policy():
    return load_policy("smollm2-135m")
