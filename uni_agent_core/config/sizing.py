"""`host_sizing`: how a recipe cuts its work on a host too slow for its budget.

A tier names a measured matmul rate and the settings a run takes on a CPU below it:

```yaml
host_sizing:
  - below_gflops: 100
    reason: no native bf16 matmul; float32 runs the demo at about twice its budget
    set:
      warm_start.epochs: 1
      trainer.backend.trainable_layers: 10
```

The rate is the one `policy.dtype: auto` measures (`models/precision_choice.py`: GFLOP/s of the
policy's own shapes, forward, backward and decode in its `MIX`) for the dtype the run computes
in. Of the tiers whose `below_gflops` the host is under, the one with the lowest applies (the
most specific: `pipeline/sizing.py`), as if its settings were given with `--set`; on an
accelerator no tier applies. Each tier's settings are checked when the recipe is loaded, on
every host.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from uni_agent_core.config.base import ConfigModel


class HostSizingTier(ConfigModel):
    """The settings a run takes on a CPU whose measured rate is below `below_gflops`."""

    below_gflops: float = Field(gt=0)
    """The tier applies where the run's dtype measured fewer GFLOP/s than this on the CPU."""
    reason: str = Field(min_length=1)
    """Why a host this slow needs the tier (printed when it applies)."""
    set: dict[str, Any] = Field(min_length=1)
    """Dotted recipe keys and the values they take (the same keys `--set` takes)."""

    def overrides(self) -> list[str]:
        """The tier's settings as `key=value` overrides."""
        from uni_agent_core.config.loading import format_override

        return [format_override(key, value) for key, value in self.set.items()]
