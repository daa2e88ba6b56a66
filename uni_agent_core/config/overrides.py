"""Per-task overrides of union sections (harness, sandbox, reward): sample-level mixing.

A `TaskSpec` may carry its own `harness`, `sandbox` or `reward` mapping. Without a `type:` (or
with the default's type) it is merged onto the run's section; with another `type:` it replaces
it. Either way the result is validated by the recipe's own models, so a bad override fails with
the same dotted-key message as a bad recipe.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from uni_agent_core.config.problems import RecipeError, problems_from_validation

T = TypeVar("T", bound=BaseModel)


def section_for_task(
    section: str, union: Any, default: T, override: dict[str, Any] | None, *, task_id: str
) -> T:
    """The effective section for one task.

    Args:
        section: the section's name (`harness`, `sandbox`, `reward`) for error messages.
        union: the section's annotated union type (e.g. `HarnessConfig`).
        default: the run's section.
        override: the task's mapping, or None.
        task_id: the task's id, named in errors.

    Raises:
        RecipeError: the merged section does not validate.
    """
    if not override:
        return default
    same_kind = override.get("type", default.type) == default.type  # type: ignore[attr-defined]
    data = {section: {**default.model_dump(), **override} if same_kind else dict(override)}
    # Typed Any like `union`, not as the inferred tuple: a `**` mapping must fit every keyword
    # of `create_model`, `__config__` included.
    fields: dict[str, Any] = {section: (union, ...)}
    wrapper = create_model(
        f"TaskOverride_{section}", __config__=ConfigDict(extra="forbid"), **fields
    )
    try:
        return getattr(wrapper.model_validate(data), section)
    except ValidationError as error:
        raise RecipeError(
            problems_from_validation(error, data, root=wrapper, file=f"task {task_id}")
        ) from None
