"""Every field of every recipe model is documented (its docstring becomes its description)."""

from __future__ import annotations

import typing
from typing import Any

from pydantic import BaseModel

from uni_agent_core.config import ConfigModel, Recipe


def reachable_models(root: type[BaseModel]) -> set[type[BaseModel]]:
    """All model classes reachable from `root` through field annotations (unions, lists...)."""
    seen: set[type[BaseModel]] = set()
    stack: list[Any] = [root]
    while stack:
        annotation = stack.pop()
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation in seen:
                continue
            seen.add(annotation)
            stack.extend(field.annotation for field in annotation.model_fields.values())
        else:
            stack.extend(typing.get_args(annotation))
    return seen


def test_walk_finds_every_section_and_union_member() -> None:
    names = {model.__name__ for model in reachable_models(Recipe)}
    assert {
        "PolicyConfig",
        "HFEngineConfig",
        "OpenAIServerEngineConfig",
        "LocalSandboxConfig",
        "ModalSandboxConfig",
        "BlackboxHarnessConfig",
        "R2EGymTasksConfig",
        "PartialCreditRewardConfig",
        "VerlBackendConfig",
        "ActorParallelConfig",
        "RolloutCorrectionConfig",
        "StalenessConfig",
        "TrackingConfig",
    } <= names
    assert len(names) >= 30


def test_every_field_has_a_description() -> None:
    undocumented = [
        f"{model.__name__}.{name}"
        for model in reachable_models(Recipe)
        for name, field in model.model_fields.items()
        if not (field.description and field.description.strip())
    ]
    assert undocumented == []


def test_every_model_forbids_unknown_keys_and_has_a_docstring() -> None:
    for model in reachable_models(Recipe):
        assert issubclass(model, ConfigModel), model
        assert model.model_config.get("extra") == "forbid", model
        assert model.model_config.get("use_attribute_docstrings") is True, model
        assert model.__doc__ and model.__doc__.strip(), model
