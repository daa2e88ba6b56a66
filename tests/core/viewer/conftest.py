"""Step files built by hand in the shape `rl/samples.py` writes, and a small HTML tree parser.

`step_rows` is one step: a two-chain episode with a rollback, a one-chain episode whose text
needs escaping, and one line in the old shape (segments only). `run_dir` writes it as steps 1
and 2 of a run directory.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from itertools import groupby
from pathlib import Path
from typing import Any

import pytest

VOID = {"meta", "br", "hr", "img", "input", "link"}


def chain_row(
    task_id: str,
    sample_index: int,
    chain_id: int,
    tokens: list[tuple[str, int]],
    **fields: Any,
) -> dict[str, Any]:
    """One line in the new shape; `tokens` are (text, mask); ids 100+i, logprob -i/10, trained
    tokens sampled by policy version 3, context tokens version -1."""
    masks = [mask for _, mask in tokens]
    segments = []
    position = 0
    for trainable, run in groupby(masks):
        length = len(list(run))
        text = "".join(t for t, _ in tokens[position : position + length])
        segments.append({"trainable": bool(trainable), "text": text})
        position += length
    row = {
        "task_id": task_id,
        "sample_index": sample_index,
        "reward": 0.0,
        "exit_reason": "submitted",
        "harness": "react",
        "group_id": f"group-{task_id}",
        "level": "L1",
        "resolved": False,
        "trace_id": None,
        "chain_id": chain_id,
        "prompt": "<|system|>You fix bugs.\n<|user|>Fix it & test.",
        "segments": segments,
        "trainable_tokens": sum(masks),
        "policy_versions": [3] if any(masks) else [],
        "opened_by": "first",
        "tokens": {
            "ids": [100 + i for i in range(len(tokens))],
            "text": [t for t, _ in tokens],
            "mask": masks,
            "logprob": [-i / 10 if m else 0.0 for i, m in enumerate(masks)],
            "version": [3 if m else -1 for m in masks],
        },
        "rollbacks": [],
    }
    row.update(fields)
    return row


@pytest.fixture
def make_row() -> Callable[..., dict[str, Any]]:
    return chain_row


@pytest.fixture
def step_rows() -> list[dict[str, Any]]:
    solved = {
        "reward": 1.0,
        "resolved": True,
        "trace_id": "tr-abc 1",
        "harness": "react",
        "level": "L1",
    }
    first = chain_row(
        "task-a",
        0,
        0,
        [
            ("I will ", 1),
            ("look.", 1),
            ("\n<tool>", 0),
            ("ls\n", 0),
            ("Now ", 1),
            ("edit", 1),
            ("[rewritten]", 0),
            (" ok\n", 0),
            ("done", 1),
        ],
        rollbacks=[{"at": 6, "dropped_text": "rm -rf /tmp/x", "dropped_tokens": 2}],
        **solved,
    )
    second = chain_row(
        "task-a",
        0,
        1,
        [("summary: ", 0), ("fixed", 1), (" it", 1)],
        opened_by="split: history diverged (compaction or edit)",
        **solved,
    )
    escaped = chain_row(
        "task-b",
        1,
        0,
        [("<script>alert(1)</script>", 1), ("\n  indented & <b>", 0), ("x", 1), (" ", 0), ("y", 1)],
        exit_reason="max_turns",
        harness="codex",
        level="L2",
    )
    old = {
        "task_id": "task-c",
        "sample_index": 0,
        "reward": 0.5,
        "exit_reason": "finished",
        "chain_id": 0,
        "prompt": "old prompt",
        "segments": [
            {"trainable": True, "text": "old answer"},
            {"trainable": False, "text": "\ntool says hi\n"},
            {"trainable": True, "text": "bye"},
        ],
        "trainable_tokens": 3,
        "policy_versions": [1],
    }
    return [first, second, escaped, old]


def write_step(directory: Path, step: int, rows: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:06d}.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@pytest.fixture
def run_dir(tmp_path: Path, step_rows: list[dict[str, Any]]) -> Path:
    """`<tmp>/run-a` with steps 1 and 2 (step 2: the first episode only)."""
    run = tmp_path / "run-a"
    write_step(run / "trajectories", 1, step_rows)
    write_step(run / "trajectories", 2, step_rows[:2])
    return run


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node | str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def find_all(self, predicate: Callable[[Node], bool]) -> list[Node]:
        """Matching descendants in document order."""
        found = []
        for child in self.children:
            if isinstance(child, Node):
                if predicate(child):
                    found.append(child)
                found.extend(child.find_all(predicate))
        return found

    def by_class(self, name: str) -> list[Node]:
        return self.find_all(lambda n: name in n.classes)

    def by_tag(self, tag: str) -> list[Node]:
        return self.find_all(lambda n: n.tag == tag)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


class TreeParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    """The page as a tree; fails on a mismatched end tag."""
    parser = TreeParser()
    parser.feed(page)
    parser.close()
    assert parser.stack == [parser.root], "unclosed elements"
    return parser.root


@pytest.fixture
def parse_page() -> Callable[[str], Node]:
    return parse


@pytest.fixture
def write_step_file() -> Callable[[Path, int, list[dict[str, Any]]], Path]:
    return write_step
