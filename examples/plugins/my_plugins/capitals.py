"""A task source: questions whose answer is one word, for `AnswerFileEnvironment`.

A recipe names it with `tasks: {type: plugin, path: my_plugins.capitals:load, options: {n: 8},
env: my_plugins.answer_env:AnswerFileEnvironment}`; it returns rows in agent-rl's task form
(`TaskSpec` fields), and `env:` sets the environment of every task it returns. Its `split`
parameter gives it a held-out split of other countries, which `eval.suite: heldout` scores.
"""

from __future__ import annotations

from typing import Any

CAPITALS = {
    "France": "paris",
    "Italy": "rome",
    "Spain": "madrid",
    "Japan": "tokyo",
    "Egypt": "cairo",
    "Peru": "lima",
    "Kenya": "nairobi",
    "Norway": "oslo",
}
HELD_OUT = {
    "Chile": "santiago",
    "Poland": "warsaw",
    "Greece": "athens",
    "Canada": "ottawa",
}


def load(options: dict[str, Any], split: str = "train") -> list[dict[str, Any]]:
    if split not in ("train", "test"):
        raise ValueError(f"capitals has the splits train and test, not {split!r}")
    countries = CAPITALS if split == "train" else HELD_OUT
    n = int(options.get("n", len(countries)))
    return [
        {
            "instance_id": f"capital-{country.lower()}",
            "problem_statement": f"What is the capital of {country}? Answer with one word.",
            "env_data": {"answer": capital},
        }
        for country, capital in list(countries.items())[:n]
    ]
