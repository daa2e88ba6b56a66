"""A real verl FSDP checkpoint on a CPU: verl's own `FSDPCheckpointManager` over FSDP2.

FSDP1 refuses a CPU ("FSDP needs a non-CPU accelerator device"); FSDP2 (`fully_shard`, verl's
default `fsdp2` strategy) runs over a one-rank gloo group and writes the same files a GPU run
of verl's trainer does, with DTensor shards on a `("fsdp",)` mesh.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torch.distributed as dist


def write_verl_fsdp_checkpoint(model, tokenizer, default_local_dir: Path, step: int) -> Path:
    """Save `model` as verl's trainer does at `step` and return the actor directory.

    Writes `<default_local_dir>/global_step_<step>/actor/` with verl's checkpoint manager (world
    size 1), then `latest_checkpointed_iteration.txt`, as verl's trainer does after a save.
    `model` is sharded in place (`fully_shard`): pass one that is not used afterwards.
    """
    from torch.distributed.device_mesh import init_device_mesh
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import apply_fsdp2

    owns_group = not dist.is_initialized()
    with tempfile.TemporaryDirectory() as store:
        if owns_group:
            dist.init_process_group("gloo", init_method=f"file://{store}/pg", rank=0, world_size=1)
        try:
            mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
            apply_fsdp2(model, {"mesh": mesh}, {})
            manager = FSDPCheckpointManager(
                model=model,
                optimizer=torch.optim.AdamW(model.parameters(), lr=1e-5),
                lr_scheduler=None,
                processing_class=tokenizer,
            )
            actor_dir = Path(default_local_dir) / f"global_step_{step}" / "actor"
            manager.save_checkpoint(local_path=str(actor_dir), global_step=step)
        finally:
            if owns_group:
                dist.destroy_process_group()
    (Path(default_local_dir) / "latest_checkpointed_iteration.txt").write_text(str(step))
    return actor_dir
