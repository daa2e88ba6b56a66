"""The curriculum section: per-task pass-rate history, difficulty estimation, dynamic sampling."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from uni_agent_core.config.base import ConfigModel, raise_conflicts


class CurriculumConfig(ConfigModel):
    """Which tasks are worth training on now, judged from their recent pass rates."""

    enabled: bool = True
    """Select tasks by recent pass rate; False samples tasks uniformly."""
    history_path: Path | None = None
    """SQLite history of every rollout's reward per task and policy step; None means
    `runs/<recipe name>/history.sqlite`."""
    window: int = Field(default=8, ge=1)
    """Most recent attempts per task that make up its pass rate."""
    min_attempts: int = Field(default=2, ge=1)
    """Attempts a task needs before its pass rate can exclude it."""
    target_band: tuple[float, float] = (0.0, 1.0)
    """A task stays eligible while `low < pass rate < high`; the default excludes exactly the
    tasks that always fail or always pass. Narrow it (e.g. [0.2, 0.8]) to steer toward ~50%."""
    probe_rate: float = Field(default=0.1, ge=0.0, le=1.0)
    """Fraction of each batch drawn from excluded tasks to re-check them as the policy changes."""
    best_of_n: int = Field(default=8, ge=1)
    """Rollouts per task in the offline difficulty estimate before training."""
    drop_zero_variance_groups: bool = True
    """Drop groups whose rewards are all equal: their advantages are zero and only dilute the
    batch."""
    refill_flat_groups: int = Field(default=0, ge=0)
    """Flat groups (every reward equal) a training step may replace before it trains, by
    launching one new group for each: DAPO's dynamic sampling, so that a step trains on groups
    that carry a signal instead of skipping its update. 0 trains on the groups that arrived.
    Replaced groups still count in the step's reward metrics and in the curriculum history."""

    @model_validator(mode="after")
    def _check_band(self) -> CurriculumConfig:
        problems: list[tuple[str, str]] = []
        low, high = self.target_band
        if not 0.0 <= low < high <= 1.0:
            problems.append(("target_band", f"need 0 <= low < high <= 1, got [{low:g}, {high:g}]"))
        if self.min_attempts > self.window:
            problems.append(
                (
                    "min_attempts",
                    f"{self.min_attempts} exceeds window ({self.window}); no task could ever "
                    "be excluded",
                )
            )
        raise_conflicts(problems)
        return self
