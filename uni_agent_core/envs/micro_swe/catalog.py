"""The micro-swe bug catalog: every template a generated task can be built from.

A `Template` (`templates.py`) wraps one reference function of `reference.py` with the public
names it may get, a plain-words description of what it does (for statements that must not name
it) and its `Mutation`s; the case generators that pair with them live in `cases.py`. The data
validator checks every generated task against the mutations' claims, and a unit test executes
every mutation against its own cases.
"""

from __future__ import annotations

from uni_agent_core.envs.micro_swe.bugs_numbers import NUMBER_TEMPLATES
from uni_agent_core.envs.micro_swe.bugs_sequences import SEQUENCE_TEMPLATES
from uni_agent_core.envs.micro_swe.bugs_text import TEXT_TEMPLATES
from uni_agent_core.envs.micro_swe.templates import Args, Mutation, Template

__all__ = ["TEMPLATES", "Args", "Mutation", "Template", "template"]

TEMPLATES: tuple[Template, ...] = NUMBER_TEMPLATES + TEXT_TEMPLATES + SEQUENCE_TEMPLATES
"""Every template, in a fixed order (the generator's seeded draws index into it)."""


def template(key: str) -> Template:
    """The template of reference function `key`."""
    for item in TEMPLATES:
        if item.key == key:
            return item
    raise KeyError(f"no micro-swe template {key!r}; known: {', '.join(t.key for t in TEMPLATES)}")
