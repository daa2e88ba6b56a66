"""Registers the example loss in verl's registry as `clipped_reinforce`, for verl's workers
(`docs/extending.md`): name this module in `VERL_USE_EXTERNAL_MODULES`, or declare it as a
`verl.plugins` entry point, and set `trainer.algorithm.policy_loss: clipped_reinforce`."""

from __future__ import annotations

from my_plugins.reinforce_loss import clipped_reinforce
from uni_agent_core.rl.losses import register_for_verl

register_for_verl("clipped_reinforce", clipped_reinforce)
