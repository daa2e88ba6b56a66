"""Every planted bug shows on its triggers and hides on its safe cases, for many seeds."""

import random

import pytest

from uni_agent_core.envs.micro_swe.catalog import TEMPLATES, Mutation, Template


def _compile(source: str, name: str):
    namespace: dict = {}
    exec(compile(source, "<micro-swe>", "exec"), namespace)  # test-only: our own template code
    return namespace[name]


@pytest.mark.parametrize(
    ("template", "mutation"),
    [(t, m) for t in TEMPLATES for m in t.mutations],
    ids=lambda item: getattr(item, "key", None) or getattr(item, "name", ""),
)
def test_mutation_fails_on_triggers_and_passes_on_safe_cases(
    template: Template, mutation: Mutation
) -> None:
    name = template.names[-1]
    correct = _compile(template.source(name), name)
    buggy = _compile(template.buggy_source(name, mutation), name)
    for seed in range(40):
        rng = random.Random(seed)
        for args in mutation.triggers(rng):
            assert correct(*args) == template.function(*args)
            assert buggy(*args) != template.function(*args), (mutation.name, args)
        for args in mutation.safe(rng):
            assert buggy(*args) == template.function(*args), (mutation.name, args)


def test_template_names_are_unique_and_anchors_unique() -> None:
    names = [name for template in TEMPLATES for name in template.names]
    assert len(names) == len(set(names))
    for template in TEMPLATES:
        for mutation in template.mutations:
            template.buggy_source(template.key, mutation)  # raises when the anchor is ambiguous
