"""The eval and tracking sections: checkpoint evaluation and the MLflow record of a run."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from uni_agent_core.config.base import ConfigModel
from uni_agent_core.config.tasks import MicroSweLevel

SourceSplit = Annotated[str, Field(pattern=r"^[A-Za-z_][\w.-]*:[A-Za-z_][\w-]*$")]
"""`NAME:SPLIT`: a split of a registered or installed task source (`capitals:test`)."""

EvalSuite = Literal["micro_swe", "shell", "heldout", "swe_bench_verified"] | SourceSplit
"""Held-out suites a checkpoint can be scored on."""


def _all_levels() -> list[MicroSweLevel]:
    return ["L0", "L1", "L2", "L3"]


class EvalConfig(ConfigModel):
    """Scoring of checkpoints on a held-out suite (avg@k and pass@k)."""

    enabled: bool = True
    """Evaluate checkpoints during the run."""
    suite: EvalSuite = "micro_swe"
    """`micro_swe`: the bundled micro-swe held-out split (runs anywhere); `shell`: the bundled
    shell tasks' held-out split; `heldout`: the held-out split of each source of `tasks:`
    (micro_swe, shell, a user's source whose function takes a `split`, or a mix of them: scores
    per kind of task); `NAME:SPLIT`: a split of a registered or installed task source;
    `swe_bench_verified`: the 500 SWE-bench Verified tasks (needs a container sandbox). A run
    whose tasks all come from files or a user's source must name its suite (the default would
    score unrelated micro-swe tasks)."""
    dataset: str | None = None
    """Rows of the suite: a local file or a cached Hugging Face dataset id; None uses the
    bundled held-out split (micro_swe) or `princeton-nlp/SWE-bench_Verified` from the cache."""
    k: int = Field(default=1, ge=1)
    """Samples per task; avg@k and pass@k are reported."""
    temperature: float | None = Field(default=None, ge=0.0)
    """Sampling temperature of evaluation episodes: 0 is greedy (one deterministic answer per
    task, so before/after scores differ only where the policy did); None samples like
    training, at `gateway.sampling.temperature`."""
    every_n_checkpoints: int = Field(default=1, ge=1)
    """Evaluate every n-th checkpoint (the final one always)."""
    max_tasks: int | None = Field(default=None, ge=1)
    """Evaluate on at most this many tasks (a fixed, seeded subset); None uses all."""
    concurrency: int = Field(default=4, ge=1)
    """Samples evaluated at once (each holds a sandbox and a gateway session); a value up to
    the engine's `max_batch_size` keeps its decode batch full."""
    levels: list[MicroSweLevel] = Field(default_factory=_all_levels, min_length=1)
    """Levels of the micro-swe held-out suite (all four by default; a run trained on L0-L1
    names them to be scored on the same kinds of bug); the shell suite takes those it has
    (L0, L1). `heldout` uses each source's own levels."""
    before_training: bool = False
    """Also score the policy RL starts from (after the warm start, if any) before RL, in the
    same MLflow run: `eval_before/...`, and `eval/pass@1_delta` once the final checkpoint is
    scored."""


class TrackingConfig(ConfigModel):
    """Where params, metrics, plots, checkpoints and sample trajectories are logged."""

    type: Literal["mlflow"] = "mlflow"
    """Tracking backend; MLflow is the only one."""
    tracking_uri: str = "sqlite:///mlruns.db"
    """MLflow tracking URI: `sqlite:///mlruns.db` locally, `http://host:5000` for a server."""
    experiment: str = "agent-rl"
    """MLflow experiment the run is filed under."""
    run_name: str | None = None
    """MLflow run name; None uses the recipe name."""
    log_trajectories_per_step: int = Field(default=4, ge=0)
    """Sample trajectories logged as artifacts per step (rendered text + token masks); 0 logs
    none."""
    traces: str = "sample 4"
    """Which episodes become MLflow traces (spans for the episode, each model call, tool call
    and the verifier; `docs/viewer.md`): `all`, `off`, or `sample N`: N a step (the ones
    written to `trajectories/`) plus every episode that fails in a way this run has not seen
    before (a new exit reason or verifier outcome). Evaluations trace the same way."""

    @field_validator("traces", mode="before")
    @classmethod
    def _traces_policy(cls, value: object) -> str:
        if value is False:  # YAML reads a bare `off` as false
            return "off"
        text = " ".join(str(value).split()).lower()
        if text in ("all", "off"):
            return text
        words = text.split(" ")
        if len(words) == 2 and words[0] == "sample" and words[1].isdigit():
            return text
        raise ValueError(f"traces must be `all`, `off` or `sample N` (N >= 0), not {value!r}")

    @property
    def traces_per_step(self) -> int | None:
        """Episodes traced a step under `sample N` (N); None under `all`, 0 under `off`."""
        if self.traces == "all":
            return None
        if self.traces == "off":
            return 0
        return int(self.traces.split(" ")[1])
