"""Names shared by the verl launcher and `UniAgentLoop`, importable without importing verl."""

AGENT_NAME = "uni_agent"
"""The name `UniAgentLoop` is registered under (verl's `agent_name` column)."""

AGENT_LOOP_CLASS = "uni_agent_core.rl.verl.agent_loop.UniAgentLoop"
"""The `_target_` of `uni_agent` in verl's agent-loop config."""

RECIPE_ENV = "AGENT_RL_VERL_RECIPE"
"""Environment variable naming the recipe file when the agent-loop config does not."""
