"""The top-level `Recipe`: one whole run, every section defaulted so a minimal recipe is short.

Rules that span sections live here: the engine must match the trainer backend, token budgets must
nest inside the training context, harness deadlines inside the sandbox's, and image-based tasks
need a container sandbox. Unset paths and budgets that default to another field are filled in, so
the validated recipe is complete and code downstream never sees those `None`s.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, model_validator

from uni_agent_core.config.backend import VerlBackendConfig
from uni_agent_core.config.base import ConfigModel, raise_conflicts
from uni_agent_core.config.curriculum import CurriculumConfig
from uni_agent_core.config.evaluation import EvalConfig, TrackingConfig
from uni_agent_core.config.gateway import GatewayConfig
from uni_agent_core.config.harness import (
    HarnessConfig,
    ReactHarnessConfig,
    harness_deadline_key,
    harness_members,
)
from uni_agent_core.config.inference import (
    EngineConfig,
    HFEngineConfig,
    OpenAIServerEngineConfig,
    RouterConfig,
)
from uni_agent_core.config.model import PolicyConfig
from uni_agent_core.config.reward import ResolvedRewardConfig, RewardConfig
from uni_agent_core.config.sandbox import CONTAINER_SANDBOXES, LocalSandboxConfig, SandboxConfig
from uni_agent_core.config.serving import ServeConfig
from uni_agent_core.config.sizing import HostSizingTier
from uni_agent_core.config.tasks import (
    GENERATED_TASKS,
    IMAGE_TASKS,
    MicroSweTasksConfig,
    TasksConfig,
    task_types,
)
from uni_agent_core.config.training import TrainerConfig
from uni_agent_core.config.warm_start import WarmStartConfig

RUNS_DIR = Path("runs")
"""Parent of every run's default checkpoint and history paths (relative to the working dir)."""


class Recipe(ConfigModel):
    """A complete agent-rl run: policy, serving stack, environment, trainer, evaluation."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=100)
    """Run name: letters, digits, `.`, `_`, `-`; names default paths and the MLflow run."""
    description: str = ""
    """One line on what this recipe is for."""
    seed: int = 0
    """Seed of everything not seeded separately (task order, sampling, initialization)."""
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    """The model that is trained and served."""
    engine: EngineConfig = Field(default_factory=HFEngineConfig)
    """Inference engine (`type: hf | openai_server`; hf when `type` is omitted)."""
    router: RouterConfig = Field(default_factory=RouterConfig)
    """Load balancing over engine replicas."""
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    """The OpenAI/Anthropic-compatible front that records trajectories."""
    sandbox: SandboxConfig = Field(default_factory=LocalSandboxConfig)
    """Where commands and tests run (`type: local | swerex | docker | modal`; local when
    omitted)."""
    harness: HarnessConfig = Field(default_factory=ReactHarnessConfig)
    """The agent program (`type: react | blackbox | mini_swe_agent`; react when omitted)."""
    tasks: TasksConfig = Field(default_factory=MicroSweTasksConfig)
    """Training tasks (`type: micro_swe | shell | swe_bench | swe_rebench | r2e_gym | mix`;
    micro_swe when omitted)."""
    reward: RewardConfig = Field(default_factory=ResolvedRewardConfig)
    """Episode scoring (`type: resolved | partial_credit`; resolved when omitted)."""
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    """Task selection by recent pass rate."""
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    """Supervised training on gold trajectories before RL (off unless `enabled`)."""
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    """The RL trainer (`backend.type: embedded | verl`; embedded when omitted)."""
    eval: EvalConfig = Field(default_factory=EvalConfig)
    """Checkpoint evaluation."""
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    """MLflow logging."""
    serve: ServeConfig = Field(default_factory=ServeConfig)
    """Inference servers the flow launches for stages that need served weights (verl recipes:
    Best-of-N, checkpoint evaluation, the nightly refresh)."""
    host_sizing: list[HostSizingTier] = Field(default_factory=list)
    """Settings a run takes on a CPU too slow for the recipe's budget, by measured GFLOP/s
    (`config/sizing.py`); none by default."""

    @model_validator(mode="after")
    def _check_sections(self) -> Recipe:
        problems: list[tuple[str, str]] = []
        self._check_engine(problems)
        self._check_token_budgets(problems)
        self._check_environment(problems)
        self._check_warm_start_split(problems)
        self._check_host_sizing(problems)
        raise_conflicts(problems)
        self._fill_defaults()
        return self

    def _check_host_sizing(self, problems: list[tuple[str, str]]) -> None:
        """Each tier's settings make a valid recipe (checked on every host, not only where the
        tier applies)."""
        if not self.host_sizing:
            return
        from uni_agent_core.config.loading import parse_recipe
        from uni_agent_core.config.problems import RecipeError

        base = self.model_dump(mode="json", exclude={"host_sizing"})
        for index, tier in enumerate(self.host_sizing):
            try:
                parse_recipe(base, tier.overrides())
            except RecipeError as error:
                for problem in error.problems:
                    problems.append(
                        (f"host_sizing.{index}.set", f"{problem.key}: {problem.message}")
                    )

    def _check_engine(self, problems: list[tuple[str, str]]) -> None:
        engine, verl = self.engine, isinstance(self.trainer.backend, VerlBackendConfig)
        if verl and not isinstance(engine, OpenAIServerEngineConfig):
            problems.append(
                (
                    "engine.type",
                    "the verl backend launches vLLM/SGLang servers and updates their weights; "
                    "use engine type openai_server (the in-process hf engine cannot be synced)",
                )
            )
        if not isinstance(engine, OpenAIServerEngineConfig):
            return
        if verl and engine.base_urls is not None:
            problems.append(
                (
                    "engine.base_urls",
                    "the verl backend launches the rollout servers and registers their "
                    "addresses at run time; remove engine.base_urls",
                )
            )
        if not verl and engine.base_urls is None:
            problems.append(
                (
                    "engine.base_urls",
                    "required: list the inference servers, e.g. [http://127.0.0.1:8000]",
                )
            )
        replicas = self.router.replicas
        if engine.base_urls and replicas is not None and replicas != len(engine.base_urls):
            problems.append(
                (
                    "router.replicas",
                    f"{replicas} does not match the {len(engine.base_urls)} engine.base_urls; "
                    "omit it to use one replica per URL",
                )
            )

    def _check_token_budgets(self, problems: list[tuple[str, str]]) -> None:
        context = self.trainer.max_context_tokens
        response = self.trainer.max_response_tokens
        if self.engine.max_model_len is not None and self.engine.max_model_len < context:
            problems.append(
                (
                    "engine.max_model_len",
                    f"{self.engine.max_model_len} is below trainer.max_context_tokens "
                    f"({context}); trajectories would be cut by the engine",
                )
            )
        limits = [("gateway.max_total_tokens", self.gateway.max_total_tokens)]
        for name, harness in harness_members(self.harness):
            if isinstance(harness, ReactHarnessConfig):
                key = "harness" if harness is self.harness else f"harness.{name}"
                limits.append((f"{key}.context_budget_tokens", harness.context_budget_tokens))
        for key, value in limits:
            if value is not None and value > context:
                problems.append(
                    (
                        key,
                        f"{value} exceeds trainer.max_context_tokens ({context}); the trainer "
                        "could not train on such trajectories",
                    )
                )
        per_call = self.gateway.sampling.max_tokens
        if per_call is not None and per_call > response:
            problems.append(
                (
                    "gateway.sampling.max_tokens",
                    f"{per_call} exceeds trainer.max_response_tokens ({response})",
                )
            )

    def _check_environment(self, problems: list[tuple[str, str]]) -> None:
        key, deadline = harness_deadline_key(self.harness)
        if deadline > self.sandbox.wall_clock_s:
            problems.append(
                (
                    f"harness.{key}",
                    f"{deadline:g} s exceeds sandbox.wall_clock_s "
                    f"({self.sandbox.wall_clock_s:g} s); the sandbox would be torn down first",
                )
            )
        if self.sandbox.type not in CONTAINER_SANDBOXES:
            for kind in sorted(task_types(self.tasks) & IMAGE_TASKS):
                problems.append(
                    (
                        "sandbox.type",
                        f"{kind} tasks ship as container images; a "
                        f"{self.sandbox.type} sandbox cannot run them (use docker, modal or "
                        "swerex)",
                    )
                )
        kinds = task_types(self.tasks)
        if self.eval.enabled and self.eval.suite == "heldout":
            # a user's source has one when its function takes a `split` (plugin_checks.py)
            others = sorted(kinds - GENERATED_TASKS - {"plugin"})
            if others:
                problems.append(
                    (
                        "eval.suite",
                        f"heldout scores the held-out split of generated task sources "
                        f"(micro_swe, shell) and of your own sources; {', '.join(others)} "
                        "tasks have none (use micro_swe, shell or swe_bench_verified)",
                    )
                )
        users_only = kinds <= {"plugin", "file"}
        if self.eval.enabled and users_only and "suite" not in self.eval.model_fields_set:
            problems.append(
                (
                    "eval.suite",
                    "the tasks come from your own source, and the default suite (micro_swe) "
                    "would score unrelated bundled tasks: name heldout (your source's held-out "
                    "split: give its function a `split` parameter), NAME:SPLIT, another suite, "
                    "or set eval.enabled: false",
                )
            )
        swe_bench = self.eval.enabled and self.eval.suite == "swe_bench_verified"
        if swe_bench and self.sandbox.type not in CONTAINER_SANDBOXES:
            problems.append(
                (
                    "eval.suite",
                    f"swe_bench_verified needs a container sandbox, not "
                    f"{self.sandbox.type} (use docker, modal or swerex, or suite micro_swe)",
                )
            )

    def _check_warm_start_split(self, problems: list[tuple[str, str]]) -> None:
        warm = self.warm_start
        count = getattr(self.tasks, "n", None)
        splits = warm.enabled and warm.rl_tasks == "rest" and warm.tasks is not None
        if splits and count is not None and count <= warm.tasks:
            problems.append(
                (
                    "warm_start.rl_tasks",
                    f"rest leaves RL no task: tasks.n ({count}) must exceed "
                    f"warm_start.tasks ({warm.tasks})",
                )
            )

    def _fill_defaults(self) -> None:
        run_dir = RUNS_DIR / self.name
        if self.trainer.checkpoint_dir is None:
            self.trainer.checkpoint_dir = run_dir / "checkpoints"
        if self.curriculum.history_path is None:
            self.curriculum.history_path = run_dir / "history.sqlite"
        if self.tracking.run_name is None:
            self.tracking.run_name = self.name
        if self.trainer.seed is None:
            self.trainer.seed = self.seed
        if self.gateway.max_total_tokens is None:
            self.gateway.max_total_tokens = self.trainer.max_context_tokens
        for _, harness in harness_members(self.harness):
            if isinstance(harness, ReactHarnessConfig) and harness.context_budget_tokens is None:
                harness.context_budget_tokens = self.trainer.max_context_tokens
        engine = self.engine
        if (
            isinstance(engine, OpenAIServerEngineConfig)
            and engine.base_urls
            and self.router.replicas is None
        ):
            self.router.replicas = len(engine.base_urls)
        elif isinstance(engine, HFEngineConfig) and self.router.replicas is None:
            self.router.replicas = 1
