"""What a micro-swe bug is: a reference function (`Template`) and a textual edit of it (`Mutation`).

A `Template` wraps one reference function of `reference.py` with the public names it may get
in a generated repository, a plain-words description of what it does (for statements that must
not name it), and its `Mutation`s. A mutation is a textual edit of the reference source that
plants one bug, plus two seeded case generators: `triggers` (arguments on which the bug shows)
and `safe` (arguments on which the buggy code still gives the right answer). Triggers become the
hidden FAIL_TO_PASS tests, safe cases the visible and hidden PASS_TO_PASS tests. The data
validator checks every generated task against exactly these claims, and a unit test executes
every mutation against its own cases.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Args = tuple[Any, ...]
CaseGen = Callable[[random.Random], list[Args]]


@dataclass(frozen=True)
class Mutation:
    """One planted bug: replace `find` (exactly once in the source) with `replace`."""

    name: str
    find: str
    replace: str
    symptom: str
    """When the bug shows, in plain words (`values above the upper bound`)."""
    triggers: CaseGen
    safe: CaseGen


@dataclass(frozen=True)
class Template:
    """A reference function and the bugs that can be planted in it."""

    function: Callable[..., Any]
    names: tuple[str, ...]
    """Public names it may get in a generated repository (the first is the reference's)."""
    behaviour: str
    """What it does, without naming it (`limiting a number to a range`)."""
    mutations: tuple[Mutation, ...]

    @property
    def key(self) -> str:
        return self.function.__name__

    def source(self, name: str) -> str:
        """The reference source with the function renamed to `name`."""
        text = inspect.getsource(self.function)
        return text.replace(f"def {self.key}(", f"def {name}(", 1)

    def buggy_source(self, name: str, mutation: Mutation) -> str:
        """The source with `mutation` applied; raises if its anchor is not unique."""
        text = self.source(name)
        if text.count(mutation.find) != 1:
            raise ValueError(
                f"{self.key}/{mutation.name}: anchor {mutation.find!r} must occur exactly once"
            )
        return text.replace(mutation.find, mutation.replace, 1)
