"""Recipe problems: readable, key-addressed errors built from pydantic's validation errors.

pydantic locates errors by its own path, which for discriminated unions includes the member tag
(`engine.hf.max_batch_size`). Users wrote `engine.max_batch_size`, so the dotted key is rebuilt by
walking the user's data: a path element is kept only when it is a key (or index) of the data at
that point. Messages say what is wrong and how to fix it: unknown keys get the closest allowed
key, bad values the allowed ones.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from uni_agent_core.config.base import Conflict
from uni_agent_core.errors import UserError

_MAX_INPUT_REPR = 60


@dataclass(frozen=True)
class RecipeProblem:
    """One thing wrong with a recipe.

    Attributes:
        file: the recipe file (or `<recipe>` for data that came from no file).
        key: dotted key as the user wrote it (`trainer.backend.nnodes`); empty for file-level
            problems such as a YAML syntax error.
        message: what is wrong and how to fix it.
    """

    file: str
    key: str
    message: str

    def __str__(self) -> str:
        if self.key:
            return f"{self.file}: {self.key}: {self.message}"
        return f"{self.file}: {self.message}"


class RecipeError(UserError, ValueError):
    """A recipe could not be loaded; `problems` lists every problem found."""

    def __init__(self, problems: Sequence[RecipeProblem]) -> None:
        self.problems: list[RecipeProblem] = list(problems)
        super().__init__("\n".join(str(problem) for problem in self.problems))


def problems_from_validation(
    error: ValidationError, data: Any, root: type[BaseModel], file: str
) -> list[RecipeProblem]:
    """Translate a pydantic `ValidationError` into recipe problems keyed by the user's keys.

    Args:
        error: the error raised by `root.model_validate(data)`.
        data: the input that was validated (parsed YAML with overrides applied).
        root: the model that was validated (normally `Recipe`).
        file: the file name to report.

    Returns:
        One problem per pydantic error (several for a multi-key `Conflict`), deduplicated, in
        pydantic's order.
    """
    problems: list[RecipeProblem] = []
    for item in error.errors(include_url=False):
        loc = tuple(item["loc"])
        key = user_key(data, loc, keep_last=item["type"] == "missing")
        cause = item.get("ctx", {}).get("error")
        if isinstance(cause, Conflict):
            for sub_key, message in cause.problems:
                problems.append(RecipeProblem(file, _join(key, sub_key), message))
            continue
        if item["type"] in ("union_tag_invalid", "union_tag_not_found"):
            tag_field = item["ctx"]["discriminator"].strip("'\"")
            key = _join(key, tag_field)
        problems.append(RecipeProblem(file, key, _message(item, root, loc)))
    unique: dict[tuple[str, str], RecipeProblem] = {}
    for problem in problems:
        unique.setdefault((problem.key, problem.message), problem)
    return list(unique.values())


def user_key(data: Any, loc: Sequence[int | str], *, keep_last: bool = False) -> str:
    """The dotted key of a pydantic location, as the user spelled it.

    Args:
        data: the validated input.
        loc: pydantic's error location.
        keep_last: keep the last element even though it is absent from the data (a missing key).

    Returns:
        e.g. `engine.max_batch_size` for the location `("engine", "hf", "max_batch_size")`.
    """
    parts: list[str] = []
    current = data
    for index, element in enumerate(loc):
        in_dict = isinstance(current, dict) and element in current
        in_list = (
            isinstance(current, list) and isinstance(element, int) and 0 <= element < len(current)
        )
        if in_dict or in_list:
            parts.append(str(element))
            current = current[element]
        elif keep_last and index == len(loc) - 1:
            parts.append(str(element))
    return ".".join(parts)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix and key else prefix or key


def _message(item: Any, root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    kind: str = item["type"]
    ctx: dict[str, Any] = item.get("ctx", {})
    got = _short(item.get("input"))
    if kind == "extra_forbidden":
        return _unknown_key_message(str(loc[-1]), model_at(root, loc[:-1]))
    if kind == "missing":
        model = model_at(root, loc[:-1])
        field = model.model_fields.get(str(loc[-1])) if model else None
        hint = f" ({_first_line(field.description)})" if field and field.description else ""
        return f"required key is missing{hint}"
    if kind == "union_tag_invalid":
        expected = _quoted(ctx["expected_tags"])
        return f"unknown type {ctx['tag']!r}{_did_you_mean(str(ctx['tag']), expected)}; " + (
            f"expected one of: {', '.join(expected)}"
        )
    if kind == "union_tag_not_found":
        return "missing `type:` key; say which kind this is"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping of keys, got {got}"
    if kind == "literal_error":
        expected = _quoted(ctx.get("expected", ""))
        suggestion = _did_you_mean(str(item.get("input")), expected)
        return f"invalid value {got}{suggestion}; expected one of: {', '.join(expected)}"
    message = str(item["msg"])
    message = message.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    message = message[:1].lower() + message[1:]
    return f"{message} (got {got})"


def _unknown_key_message(key: str, model: type[BaseModel] | None) -> str:
    if model is None:
        return "unknown key"
    allowed = list(model.model_fields)
    return f"unknown key {key!r}{_did_you_mean(key, allowed)}; allowed keys: {', '.join(allowed)}"


def _did_you_mean(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=2, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(choice) for choice in close) + "?)"


def _quoted(text: str) -> list[str]:
    return re.findall(r"'([^']*)'", text)


def _short(value: Any) -> str:
    text = repr(value)
    if len(text) > _MAX_INPUT_REPR:
        text = text[: _MAX_INPUT_REPR - 3] + "..."
    return text


def _first_line(text: str) -> str:
    return " ".join(text.split("\n\n")[0].split())


def model_at(root: type[BaseModel], loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model class found at a pydantic location (tags of unions select the member).

    Args:
        root: the model validated at the top.
        loc: a pydantic error location (or a prefix of one).

    Returns:
        The model class, or None when the location does not lead to a model.
    """
    current: Any = root
    for element in loc:
        current = _step(current, element)
        if current is None:
            return None
    return _as_model(_strip_optional(current))


def _step(annotation: Any, element: Any) -> Any:
    annotation = _strip_optional(annotation)
    model = _as_model(annotation)
    if model is not None:
        field = model.model_fields.get(str(element))
        return field.annotation if field is not None else None
    members = _union_members(annotation)
    if members:
        return members.get(str(element))
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (list, tuple, set, frozenset) and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return None


def _union_members(annotation: Any) -> dict[str, type[BaseModel]]:
    """Members of a (possibly Annotated) union of models, keyed by their `type` tag."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return {}
    members: dict[str, type[BaseModel]] = {}
    for arg in typing.get_args(annotation):
        model = _as_model(arg)
        tag_field = model.model_fields.get("type") if model else None
        if model is not None and tag_field is not None:
            for tag in typing.get_args(tag_field.annotation):
                members[str(tag)] = model
    return members


def _strip_optional(annotation: Any) -> Any:
    """`X | None` -> `X` (pydantic puts no tag in the location for a nullable field)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _as_model(annotation: Any) -> type[BaseModel] | None:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None
