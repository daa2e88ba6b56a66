"""Prefect Block types of agent-rl (register with `prefect block register -m blocks`).

Blocks hold what differs between clusters and must not live in recipes: where the inference
servers are, which sandbox backend to use, the MLflow server, and cloud credentials (secrets as
`SecretStr`, never printed). Each turns into recipe overrides (`KEY=VALUE`) or environment
variables that the flows apply; the values are validated with `uni_agent_core.config`.
"""

from blocks.agent_rl import (
    CloudCredentials,
    InferenceCluster,
    MlflowTracking,
    SandboxBackend,
    apply_blocks,
)

__all__ = [
    "CloudCredentials",
    "InferenceCluster",
    "MlflowTracking",
    "SandboxBackend",
    "apply_blocks",
]
