"""A run's step files read into episodes: typed records of what `rl/samples.py` writes.

Each line of `step-NNNNNN.jsonl` is one chain of one episode; `read_step` groups the lines by
(task id, sample index) into `Episode`s, episodes and their chains in file order. Lines written
before per-token records existed lack `tokens`, `rollbacks`, `opened_by` and the episode fields
after `exit_reason`: they read with `tokens=None`, no rollbacks and `opened_by="unknown"`, and
are shown by their segments. A malformed line is a `ViewerError` naming the file, line and field.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from uni_agent_core.errors import UserError

UNKNOWN = "unknown"
"""`opened_by` and `harness` of lines written before those fields existed."""

STEP_FILE = re.compile(r"^step-(\d+)\.jsonl$")


class ViewerError(UserError):
    """A problem with what a view was asked to show (a missing run directory, step or MLflow
    run, a malformed step file): the command line prints it as one `error:` line."""


class StepNotFoundError(ViewerError):
    """The asked step has no step file."""


@dataclass(frozen=True)
class Segment:
    """A maximal run of response text with one loss mask."""

    trainable: bool
    text: str


@dataclass(frozen=True)
class Token:
    """One response token: what the engine sampled (trainable) or context the client added."""

    id: int
    text: str
    trainable: bool
    logprob: float | None
    """Log-probability under the weights that sampled it; None when not recorded."""
    version: int | None
    """Policy version that sampled it; None for context tokens (recorded as negative)."""


@dataclass(frozen=True)
class Rollback:
    """An action the engine sampled and the client replaced with its own rewrite."""

    at: int
    """Index into the chain's tokens where the rewritten context starts."""
    dropped_text: str
    dropped_tokens: int


@dataclass(frozen=True)
class Chain:
    """One chain of an episode: a prompt and the response the trainer sees."""

    chain_id: int
    prompt: str
    segments: tuple[Segment, ...]
    tokens: tuple[Token, ...] | None
    """One per response token, in the order of `segments`; None on lines without them."""
    rollbacks: tuple[Rollback, ...]
    opened_by: str
    """Why the gateway opened this chain ("first", "split: ...", "sibling sample", ...)."""
    trainable_tokens: int
    policy_versions: tuple[int, ...]


@dataclass(frozen=True)
class Episode:
    """One sample of one task: its outcome and its chains in order."""

    task_id: str
    sample_index: int
    reward: float
    exit_reason: str
    harness: str
    group_id: str | None
    level: str | None
    resolved: bool | None
    trace_id: str | None
    chains: tuple[Chain, ...]


@dataclass(frozen=True)
class StepFile:
    """A step's file of sampled trajectories."""

    step: int
    path: Path


def list_steps(trajectories_dir: Path) -> list[StepFile]:
    """The step files in `trajectories_dir`, by step number (empty when none)."""
    found = []
    for path in Path(trajectories_dir).glob("step-*.jsonl"):
        match = STEP_FILE.match(path.name)
        if match and path.is_file():
            found.append(StepFile(int(match.group(1)), path))
    return sorted(found, key=lambda s: s.step)


def find_step(trajectories_dir: Path, step: int | None = None) -> StepFile:
    """The file of `step` (None: the newest step).

    Raises:
        StepNotFoundError: the directory has no such step (or no steps at all).
    """
    steps = list_steps(trajectories_dir)
    if not steps:
        raise StepNotFoundError(f"no step files (step-NNNNNN.jsonl) in {trajectories_dir}")
    if step is None:
        return steps[-1]
    for candidate in steps:
        if candidate.step == step:
            return candidate
    have = ", ".join(str(s.step) for s in steps[:20]) + (" ..." if len(steps) > 20 else "")
    raise StepNotFoundError(f"no step {step} in {trajectories_dir} (steps: {have})")


def read_step(path: Path) -> list[Episode]:
    """Read a step file into its episodes, in order of first appearance.

    Raises:
        ViewerError: the file is unreadable, or a line is not JSON or lacks a field.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise ViewerError(f"cannot read {path}: {error.strerror or error}") from error
    heads: dict[tuple[str, int], Episode] = {}
    chains: dict[tuple[str, int], list[Chain]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ViewerError(f"{where}: not a JSON line ({error.msg})") from error
        if not isinstance(row, dict):
            raise ViewerError(f"{where}: expected a JSON object, got {type(row).__name__}")
        try:
            key = (str(_field(row, "task_id", where)), int(_field(row, "sample_index", where)))
            chain = _chain(row, where)
            if key not in heads:
                heads[key] = _episode(row)
        except (TypeError, ValueError) as error:
            raise ViewerError(f"{where}: malformed line ({error})") from error
        chains.setdefault(key, []).append(chain)
    return [replace(head, chains=tuple(chains[key])) for key, head in heads.items()]


def _field(row: dict[str, Any], name: str, where: str) -> Any:
    if name not in row:
        raise ViewerError(f"{where}: missing field {name!r}")
    return row[name]


def _episode(row: dict[str, Any]) -> Episode:
    """The episode fields of a line (every line of an episode repeats them); no chains yet."""
    level = row.get("level")
    resolved = row.get("resolved")
    return Episode(
        task_id=str(row["task_id"]),
        sample_index=int(row["sample_index"]),
        reward=float(row.get("reward", math.nan)),
        exit_reason=str(row.get("exit_reason", UNKNOWN)),
        harness=str(row.get("harness") or UNKNOWN),
        group_id=None if row.get("group_id") is None else str(row["group_id"]),
        level=None if level is None else str(level),
        resolved=None if resolved is None else bool(resolved),
        trace_id=row.get("trace_id") or None,
        chains=(),
    )


def _chain(row: dict[str, Any], where: str) -> Chain:
    segments = _field(row, "segments", where)
    if not isinstance(segments, list):
        raise ViewerError(f"{where}: 'segments' must be a list")
    try:
        parsed = tuple(Segment(bool(s["trainable"]), str(s["text"])) for s in segments)
    except (KeyError, TypeError) as error:
        raise ViewerError(f"{where}: each segment needs 'trainable' and 'text'") from error
    tokens = _tokens(row["tokens"], where) if row.get("tokens") is not None else None
    return Chain(
        chain_id=int(_field(row, "chain_id", where)),
        prompt=str(row.get("prompt", "")),
        segments=parsed,
        tokens=tokens,
        rollbacks=_rollbacks(row.get("rollbacks") or [], where),
        opened_by=str(row.get("opened_by") or UNKNOWN),
        trainable_tokens=int(row.get("trainable_tokens", 0)),
        policy_versions=tuple(int(v) for v in row.get("policy_versions") or []),
    )


TOKEN_FIELDS = ("ids", "text", "mask", "logprob", "version")


def _tokens(tokens: Any, where: str) -> tuple[Token, ...]:
    if not isinstance(tokens, dict):
        raise ViewerError(f"{where}: 'tokens' must be an object with {', '.join(TOKEN_FIELDS)}")
    columns = {}
    for name in TOKEN_FIELDS:
        column = tokens.get(name)
        if not isinstance(column, list):
            raise ViewerError(f"{where}: 'tokens.{name}' must be a list")
        columns[name] = column
    size = len(columns["ids"])
    for name, column in columns.items():
        if len(column) != size:
            raise ViewerError(
                f"{where}: 'tokens.{name}' has {len(column)} entries, 'tokens.ids' {size}"
            )
    return tuple(
        Token(
            id=int(token_id),
            text=str(text),
            trainable=bool(mask),
            logprob=None if logprob is None or math.isnan(logprob) else float(logprob),
            version=None if version is None or version < 0 else int(version),
        )
        for token_id, text, mask, logprob, version in zip(
            *(columns[name] for name in TOKEN_FIELDS), strict=True
        )
    )


def _rollbacks(rollbacks: Any, where: str) -> tuple[Rollback, ...]:
    if not isinstance(rollbacks, list):
        raise ViewerError(f"{where}: 'rollbacks' must be a list")
    try:
        return tuple(
            Rollback(int(r["at"]), str(r.get("dropped_text", "")), int(r.get("dropped_tokens", 0)))
            for r in rollbacks
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ViewerError(f"{where}: each rollback needs 'at' (a token index)") from error
