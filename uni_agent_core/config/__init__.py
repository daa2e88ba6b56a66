"""Recipe models and loading: a whole agent-rl run as validated YAML.

`load_recipe(path, overrides)` reads a recipe, applies `--set key.sub=value` overrides and returns
a `Recipe`; any problem raises `RecipeError` naming the file, the dotted key and the fix. The
section models are exported for code that builds runtime objects from a recipe.
"""

from uni_agent_core.config.algorithm import AlgorithmConfig, RolloutCorrectionConfig
from uni_agent_core.config.backend import (
    ActorParallelConfig,
    EmbeddedBackendConfig,
    RolloutPoolConfig,
    TrainerBackendConfig,
    VerlBackendConfig,
)
from uni_agent_core.config.base import ConfigModel, Conflict
from uni_agent_core.config.curriculum import CurriculumConfig
from uni_agent_core.config.evaluation import EvalConfig, TrackingConfig
from uni_agent_core.config.gateway import GatewayConfig, SamplingConfig
from uni_agent_core.config.harness import (
    BlackboxHarnessConfig,
    ClaudeCodeHarnessConfig,
    CodexHarnessConfig,
    HarnessConfig,
    MiniSweAgentHarnessConfig,
    MixHarnessConfig,
    ReactHarnessConfig,
)
from uni_agent_core.config.inference import (
    EngineConfig,
    HFEngineConfig,
    OpenAIServerEngineConfig,
    RouterConfig,
)
from uni_agent_core.config.loading import (
    apply_overrides,
    load_recipe,
    parse_recipe,
    read_recipe_data,
    validate_paths,
)
from uni_agent_core.config.model import PolicyConfig
from uni_agent_core.config.problems import RecipeError, RecipeProblem
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.config.reward import (
    PartialCreditRewardConfig,
    ResolvedRewardConfig,
    RewardConfig,
)
from uni_agent_core.config.sandbox import (
    DockerSandboxConfig,
    LocalSandboxConfig,
    ModalSandboxConfig,
    SandboxConfig,
    SwerexSandboxConfig,
)
from uni_agent_core.config.tasks import (
    MicroSweTasksConfig,
    R2EGymTasksConfig,
    SweBenchTasksConfig,
    SweRebenchTasksConfig,
    TasksConfig,
)
from uni_agent_core.config.training import StalenessConfig, TrainerConfig

__all__ = [
    "ActorParallelConfig",
    "AlgorithmConfig",
    "BlackboxHarnessConfig",
    "ClaudeCodeHarnessConfig",
    "CodexHarnessConfig",
    "ConfigModel",
    "Conflict",
    "CurriculumConfig",
    "DockerSandboxConfig",
    "EmbeddedBackendConfig",
    "EngineConfig",
    "EvalConfig",
    "GatewayConfig",
    "HFEngineConfig",
    "HarnessConfig",
    "LocalSandboxConfig",
    "MiniSweAgentHarnessConfig",
    "MixHarnessConfig",
    "ModalSandboxConfig",
    "MicroSweTasksConfig",
    "OpenAIServerEngineConfig",
    "PartialCreditRewardConfig",
    "PolicyConfig",
    "R2EGymTasksConfig",
    "ReactHarnessConfig",
    "Recipe",
    "RecipeError",
    "RecipeProblem",
    "ResolvedRewardConfig",
    "RewardConfig",
    "RolloutCorrectionConfig",
    "RolloutPoolConfig",
    "RouterConfig",
    "SamplingConfig",
    "SandboxConfig",
    "StalenessConfig",
    "SweBenchTasksConfig",
    "SweRebenchTasksConfig",
    "SwerexSandboxConfig",
    "TasksConfig",
    "TrackingConfig",
    "TrainerBackendConfig",
    "TrainerConfig",
    "VerlBackendConfig",
    "apply_overrides",
    "load_recipe",
    "parse_recipe",
    "read_recipe_data",
    "validate_paths",
]
