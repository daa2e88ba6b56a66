"""The base of every recipe model and the exception that cross-field rules raise.

Every section model derives from `ConfigModel`, so all of them reject unknown keys and turn the
docstring under each field into that field's description (what `agent-rl recipe validate` and the
docs show). Cross-field rules raise `Conflict`, which names the offending keys so the loader can
report `trainer.batch_size: ...` instead of a bare message. `Duration` is the one type of every
timeout, deadline and expiry, bounded by `MAX_DURATION_S`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from uni_agent_core.errors import UserError

HostDevice = Literal["cpu", "cuda", "npu", "auto"]
"""Where an in-process component runs; `auto` picks cuda, then npu, then cpu."""

AcceleratorDevice = Literal["cuda", "npu"]
"""Accelerator kind of a GPU/NPU pool (NVIDIA CUDA or Ascend NPU)."""

MAX_DURATION_S = 86_400.0
"""A day: the most seconds any timeout, deadline or expiry of a recipe may be. No sandbox,
command, test run, episode or request of a run needs longer; a larger value is a unit slip
(milliseconds for seconds) or a stand-in for "never", and every wait must have a limit."""


def _at_most_a_day(seconds: float) -> float:
    if seconds > MAX_DURATION_S:
        raise ValueError(
            f"{seconds:g} s exceeds 24 h ({MAX_DURATION_S:g} s), the longest timeout a recipe "
            "may set; every wait needs a real limit"
        )
    return seconds


Duration = Annotated[
    float,
    Field(gt=0, json_schema_extra={"maximum": MAX_DURATION_S}),
    AfterValidator(_at_most_a_day),
]
"""Seconds of a timeout, deadline or expiry: positive and at most `MAX_DURATION_S` (a day)."""


ImportPath = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        examples=["my_package.my_module:MyHarness"],
    ),
]
"""A user's own object, `package.module:attribute` (`uni_agent_core.plugins`); whether it
imports and fits is checked when the recipe is checked on a host."""

PluginRef = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z_][\w.-]*(:[A-Za-z_][\w.]*)?$",
        examples=["my_package.my_module:build", "my_installed_plugin"],
    ),
]
"""A user's plug-in: `package.module:attribute`, or the short name an installed package
declares as an entry point (`uni_agent_core.plugins`, `agent-rl plugins list`)."""


class ConfigModel(BaseModel):
    """Base of all recipe models: unknown keys are errors and field docstrings are descriptions.

    A section that is a discriminated union on `type` may omit `type`; it then means the kind of
    the field's default (so `engine: {max_batch_size: 4}` and `--set engine.max_batch_size=4`
    tune the default hf engine instead of failing for a missing tag).
    """

    model_config = ConfigDict(
        extra="forbid",
        use_attribute_docstrings=True,
        validate_default=True,
    )

    @model_validator(mode="before")
    @classmethod
    def _default_union_tags(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        filled: dict[Any, Any] | None = None
        for name, field in cls.model_fields.items():
            value = data.get(name)
            if (
                field.discriminator == "type"
                and field.default_factory is not None
                and isinstance(value, dict)
                and "type" not in value
            ):
                default = field.default_factory()  # type: ignore[call-arg]
                filled = filled if filled is not None else dict(data)
                filled[name] = {"type": default.type, **value}
        return filled if filled is not None else data


class Conflict(UserError, ValueError):
    """One or more cross-field rules failed.

    Attributes:
        problems: `(key, message)` pairs; `key` is a dotted path relative to the model whose
            validator raised, e.g. `backend.ppo_mini_batch_size` inside `trainer`.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems: list[tuple[str, str]] = list(problems)
        super().__init__("; ".join(f"{key}: {message}" for key, message in self.problems))


def raise_conflicts(problems: Sequence[tuple[str, str]]) -> None:
    """Raise `Conflict` when any cross-field rule failed.

    Args:
        problems: the `(key, message)` pairs collected by a model validator; empty means valid.

    Raises:
        Conflict: when `problems` is not empty.
    """
    if problems:
        raise Conflict(problems)
