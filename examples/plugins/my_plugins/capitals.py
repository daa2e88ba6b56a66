"""A task source: questions whose answer is one word, for `AnswerFileEnvironment`.

A recipe names it with `tasks: {type: plugin, path: my_plugins.capitals:load, options: {n: 8},
env: my_plugins.answer_env:AnswerFileEnvironment}`; it returns rows in agent-rl's task form
(`TaskSpec` fields), and `env:` sets the environment of every task it returns.
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


def load(options: dict[str, Any]) -> list[dict[str, Any]]:
    n = int(options.get("n", len(CAPITALS)))
    return [
        {
            "instance_id": f"capital-{country.lower()}",
            "problem_statement": f"What is the capital of {country}? Answer with one word.",
            "env_data": {"answer": capital},
        }
        for country, capital in list(CAPITALS.items())[:n]
    ]
