"""Curriculum refresh: pass-rate estimates from the history, published as a new version.

A published curriculum is `curriculum-v<NNNN>.json` (version, source checkpoint, window, band,
counts per bucket, and per task: pass rate, attempts, bucket, active) in a directory whose
`LATEST` file names the current version. Publishing is atomic and idempotent:

- the version file is written to a temporary name and renamed, then `LATEST` is replaced the
  same way, so a failure at any point leaves the previous version current;
- when the content (everything but the version number) equals the current version's, nothing
  is published and the current version is returned.

`refresh_curriculum` is what the nightly Prefect deployment calls (after fresh Best-of-N probes
with the latest checkpoint have been recorded into the history).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uni_agent_core.curriculum.difficulty import BUCKETS, bucket_of
from uni_agent_core.curriculum.history import AttemptHistory, PassRate

LATEST = "LATEST"


@dataclass
class Published:
    """The outcome of a refresh."""

    version: int
    path: Path
    published: bool
    """False when the content equalled the current version's (nothing new was written)."""
    diff: dict[str, Any] = field(default_factory=dict)


def curriculum_content(
    estimates: dict[str, PassRate],
    task_ids: Sequence[str],
    *,
    window: int,
    band: tuple[float, float],
    min_attempts: int,
    source_checkpoint: str | None,
) -> dict[str, Any]:
    """The versionless content of a curriculum (deterministic for equal inputs)."""
    low, high = band
    tasks: dict[str, Any] = {}
    for task_id in sorted(task_ids):
        estimate = estimates.get(task_id)
        if estimate is None or estimate.attempts < min_attempts:
            tasks[task_id] = {
                "pass_rate": None,
                "attempts": 0 if estimate is None else estimate.attempts,
                "bucket": "unknown",
                "active": True,
            }
            continue
        tasks[task_id] = {
            "pass_rate": round(estimate.rate, 6),
            "attempts": estimate.attempts,
            "bucket": bucket_of(estimate.rate),
            "active": low < estimate.rate < high,
        }
    counts = {bucket: 0 for bucket in (*BUCKETS, "unknown")}
    for entry in tasks.values():
        counts[entry["bucket"]] += 1
    return {
        "source_checkpoint": source_checkpoint,
        "window": window,
        "band": list(band),
        "min_attempts": min_attempts,
        "counts": counts,
        "active_tasks": sum(entry["active"] for entry in tasks.values()),
        "tasks": tasks,
    }


def _digest(content: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def current_version(directory: Path) -> tuple[int, dict[str, Any]] | None:
    """The current version number and its document, or None when nothing was published."""
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    version = int(pointer.read_text().strip())
    return version, json.loads((directory / f"curriculum-v{version:04d}.json").read_text())


def _atomic_write(path: Path, text: str) -> None:
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


def _diff(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    if old is None:
        return {"previous_version": None}
    before, after = old["tasks"], new["tasks"]
    return {
        "previous_version": old["version"],
        "activated": sorted(
            t for t in after if after[t]["active"] and not before.get(t, {}).get("active", False)
        ),
        "excluded": sorted(
            t for t in after if not after[t]["active"] and before.get(t, {}).get("active", True)
        ),
        "bucket_changes": sum(
            1 for t in after if before.get(t, {}).get("bucket") != after[t]["bucket"]
        ),
        "added": sorted(set(after) - set(before)),
        "removed": sorted(set(before) - set(after)),
    }


def publish(content: dict[str, Any], directory: str | Path) -> Published:
    """Publish `content` as the next version (or return the current one if unchanged)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    digest = _digest(content)
    current = current_version(root)
    if current is not None and current[1].get("content_sha256") == digest:
        version = current[0]
        return Published(version, root / f"curriculum-v{version:04d}.json", published=False)
    version = 1 if current is None else current[0] + 1
    document = {"version": version, "content_sha256": digest, **content}
    path = root / f"curriculum-v{version:04d}.json"
    _atomic_write(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
    _atomic_write(root / LATEST, f"{version}\n")
    return Published(version, path, published=True, diff=_diff(current and current[1], document))


def refresh_curriculum(
    history: AttemptHistory,
    task_ids: Sequence[str],
    directory: str | Path,
    *,
    window: int,
    band: tuple[float, float],
    min_attempts: int,
    source_checkpoint: str | None = None,
) -> Published:
    """Estimate every task's pass rate from the history and publish the curriculum."""
    content = curriculum_content(
        history.estimates(window),
        task_ids,
        window=window,
        band=band,
        min_attempts=min_attempts,
        source_checkpoint=source_checkpoint,
    )
    return publish(content, directory)
