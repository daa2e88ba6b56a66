"""Loading recipes: YAML files plus `--set key.sub=value` overrides, validated into a `Recipe`.

Every failure (missing file, YAML syntax, duplicate keys, a bad override, a validation error)
becomes a `RecipeError` listing `RecipeProblem(file, key, message)`s, so `agent-rl recipe
validate` can name each bad key and the fix.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml
from pydantic import ValidationError

from uni_agent_core.config.problems import RecipeError, RecipeProblem, problems_from_validation
from uni_agent_core.config.recipe import Recipe

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictSafeLoader(yaml.SafeLoader):
    """A safe loader that rejects duplicate mapping keys instead of keeping the last one."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    # Only the mapping's own keys count: a key that overrides one merged in with `<<:` is fine.
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):
            continue  # construct_mapping reports unhashable keys itself
        if key in first_line:
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"duplicate key {key!r} (first given at line {first_line[key]})",
                key_node.start_mark,
            )
        first_line[key] = key_node.start_mark.line + 1
    return loader.construct_mapping(node, deep=True)


_StrictSafeLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> Recipe:
    """Read, override and validate a recipe file.

    Args:
        path: the recipe YAML file.
        overrides: `key.sub=value` strings (the CLI's `--set`); each value is parsed as YAML,
            so `8`, `1e-6`, `true`, `null` and `[L0, L1]` keep their types.

    Returns:
        The validated recipe.

    Raises:
        RecipeError: listing every problem found (file, dotted key, message).
    """
    file = str(path)
    return parse_recipe(read_recipe_data(path), overrides, source=file)


def parse_recipe(
    data: Mapping[str, Any], overrides: Sequence[str] = (), *, source: str = "<recipe>"
) -> Recipe:
    """Validate recipe data that is already parsed (e.g. built by a Prefect block).

    Args:
        data: the recipe as a mapping; it is not modified.
        overrides: `key.sub=value` strings applied before validation.
        source: the name problems are reported under.

    Returns:
        The validated recipe.

    Raises:
        RecipeError: listing every problem found.
    """
    merged = apply_overrides(data, overrides, source=source)
    try:
        return Recipe.model_validate(merged)
    except ValidationError as error:
        problems = problems_from_validation(error, merged, Recipe, source)
        raise RecipeError(_blame_overrides(problems, overrides)) from None


def read_recipe_data(path: str | Path) -> dict[str, Any]:
    """Parse a recipe file into a mapping, with clear errors for unreadable or malformed files.

    Args:
        path: the recipe YAML file.

    Returns:
        The top-level mapping.

    Raises:
        RecipeError: the file is missing, unreadable, not valid YAML, or not a mapping.
    """
    file = str(path)

    def fail(message: str) -> RecipeError:
        return RecipeError([RecipeProblem(file, "", message)])

    source = Path(path)
    if not source.exists():
        raise fail("file not found")
    if source.is_dir():
        raise fail("is a directory, not a recipe file")
    try:
        text = source.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise fail("not UTF-8 text") from None
    except OSError as error:  # permission denied, a file gone since the check above, ...
        raise fail(f"cannot read it: {error.strerror or error}") from None
    try:
        data = yaml.load(text, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        raise fail(_yaml_message(error)) from None
    except yaml.YAMLError as error:
        raise fail(f"invalid YAML: {error}") from None
    if data is None:
        raise fail("the file is empty; a recipe needs at least `name:`")
    if not isinstance(data, dict):
        raise fail(
            "the top level must be a mapping of sections (name, policy, engine, trainer, ...), "
            f"got a {type(data).__name__}"
        )
    return data


def format_override(key: str, value: Any) -> str:
    """The `key.sub=value` override that sets `key` to `value` (JSON is YAML, so a mapping or
    list round-trips through `apply_overrides` unchanged)."""
    return f"{key}={json.dumps(value)}"


def apply_overrides(
    data: Mapping[str, Any], overrides: Iterable[str], *, source: str = "<recipe>"
) -> dict[str, Any]:
    """Return a deep copy of `data` with `key.sub=value` overrides applied.

    Missing intermediate mappings are created; a numeric part indexes into a list.

    Args:
        data: the recipe mapping; it is not modified.
        overrides: `key.sub=value` strings; values are parsed as YAML.
        source: the name problems are reported under.

    Returns:
        The overridden copy.

    Raises:
        RecipeError: an override is malformed or its path crosses a non-mapping value.
    """
    result: dict[str, Any] = copy.deepcopy(dict(data))
    problems: list[RecipeProblem] = []
    for override in overrides:
        problem = _apply_one(result, override)
        if problem is not None:
            key, message = problem
            problems.append(RecipeProblem(source, key, f"{message} (from --set {override})"))
    if problems:
        raise RecipeError(problems)
    return result


INVALID_RECIPE = 2
"""Exit status of `agent-rl recipe validate` when a file has problems."""


def validate_paths(
    paths: Iterable[str | Path],
    out: TextIO,
    err: TextIO,
    overrides: Sequence[str] = (),
    load: Callable[[str | Path, Sequence[str]], Recipe] = load_recipe,
) -> int:
    """Validate recipe files, printing `OK <path>` or one line per problem.

    Args:
        paths: recipe files.
        out: receives `OK <path>` for every valid file.
        err: receives `<path>: <dotted.key>: <message>` for every problem.
        overrides: `key.sub=value` overrides applied to every file before validation.
        load: reads and checks one file, raising `RecipeError`; `load_recipe` by default, the
            command line's loader adds the checks of the host it runs on.

    Returns:
        0 when every file is valid, else `INVALID_RECIPE` (2, like every command's recipe
        error).
    """
    status = 0
    for path in paths:
        try:
            load(path, overrides)
        except RecipeError as error:
            status = INVALID_RECIPE
            for problem in error.problems:
                print(problem, file=err)
        else:
            print(f"OK {path}", file=out)
    return status


def _apply_one(data: dict[str, Any], override: str) -> tuple[str, str] | None:
    key, sep, raw = override.partition("=")
    key = key.strip()
    parts = key.split(".")
    if not sep or not key or not all(parts):
        return key, "an override must look like key.sub=value"
    try:
        value = yaml.load(raw, Loader=_StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as error:
        return key, f"cannot parse the value {raw!r} as YAML ({error})"
    current: Any = data
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth]) or "the top level"
        if isinstance(current, dict):
            if last:
                current[part] = value
            else:
                if current.get(part) is None:  # absent, or an empty `section:` line
                    current[part] = {}
                current = current[part]
        elif isinstance(current, list) and part.isdigit():
            index = int(part)
            if index >= len(current):
                return key, f"{where} has {len(current)} items, no index {index}"
            if last:
                current[index] = value
            else:
                current = current[index]
        else:
            return key, f"{where} is a {type(current).__name__}, not a mapping"
    return None


def _blame_overrides(
    problems: list[RecipeProblem], overrides: Sequence[str]
) -> list[RecipeProblem]:
    """Mention the `--set` that introduced a bad key, so users look in the right place."""
    keys = [(override.partition("=")[0].strip(), override) for override in overrides]
    blamed: list[RecipeProblem] = []
    for problem in problems:
        origin = next(
            (
                override
                for key, override in reversed(keys)
                if problem.key == key or problem.key.startswith(key + ".")
            ),
            None,
        )
        if origin is not None:
            problem = RecipeProblem(
                problem.file, problem.key, f"{problem.message} (from --set {origin})"
            )
        blamed.append(problem)
    return blamed


def _yaml_message(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = error.problem or error.context or "syntax error"
    return f"invalid YAML{where}: {what}"
