"""A training run whose reward is the parity of the sum of each episode's sampled token ids.

The tiny random policy never solves a task, so every group would be flat and nothing would be
trained; this test-only driver keeps everything real (engine, gateway, harness, sandbox,
verifier) and replaces only the reward with a deterministic function of the sampled tokens, so
groups vary and the trainer updates. Run as a script for the SIGKILL/resume test:
`python -m support.parity_run RECIPE RUN_DIR [KEY=VALUE ...]`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.rl.run import TrainingRun
from uni_agent_core.rollout.driver import RolloutDriver
from uni_agent_core.types import RolloutResult, TaskSpec


class ParityRewardDriver(RolloutDriver):
    async def _episode(self, task: TaskSpec, sample_index: int, seed: int) -> RolloutResult:
        result = await super()._episode(task, sample_index, seed)
        sampled = sum(
            token
            for trajectory in result.trajectories
            for token, mask in zip(trajectory.response_ids, trajectory.loss_mask, strict=True)
            if mask
        )
        reward = float(sampled % 2)
        for trajectory in result.trajectories:
            trajectory.reward = reward
        return result.model_copy(update={"reward": reward})


def parity_run(
    recipe_path: str, run_dir: str, overrides: list[str], *, track: bool = False
) -> TrainingRun:
    recipe = load_recipe(recipe_path, overrides)
    return TrainingRun(recipe, run_dir=Path(run_dir), driver_class=ParityRewardDriver, track=track)


if __name__ == "__main__":
    parity_run(sys.argv[1], sys.argv[2], sys.argv[3:]).run()
