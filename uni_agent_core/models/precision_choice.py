"""`policy.dtype: auto`: the compute dtype this host runs the policy fastest in, measured.

The CPU classes this project runs on differ by 100x in their best matmul rate (`host_cpu.py`):
bf16 is 9x float32 with AMX, 2.5x with AVX512-BF16, and 8x *slower* on an AVX2-only CPU, where
PyTorch computes bf16 matmuls with its reference GEMM on one thread. No fixed recipe is right
on all three, so `auto` measures.

`choose_dtype(policy)` times the policy's own shapes (its MLP projection, `hidden x
intermediate`) in each candidate dtype: a training micro-batch's forward, its backward (both
gradient matmuls) and a decode batch's forward, in GFLOP/s. A step's cost weighs them as a run
does (`MIX`: forward 1, backward 2, decode 1 per FLOP). The fastest candidate wins if it beats
float32 by `MIN_SPEEDUP` (float32, the exact reference, takes ties) and, for bf16, if its
logprobs on a fixed text correlate with float32's at Pearson >= `PEARSON_FLOOR` (the head as the
engines compute it, `lm_head.py`). The choice, its rates and its reason are cached under
`$AGENT_RL_CACHE/precision/`, keyed by the CPU (model and flags), the torch version, the thread
count and the policy's shapes: a host measures once (a few seconds), later runs read it.

On an accelerator (`device` other than `cpu`) `auto` is bfloat16 without a measurement: bf16
is native on every GPU and NPU the project targets.

`decide(rates, pearson)` is the rule alone, a pure function; the tests run it on probe results
recorded on each CPU class.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, cast

from uni_agent_core.host_cpu import cpu_class, cpu_identity, cpu_info
from uni_agent_core.models.registry import cache_root, prepare_policy

LOG = logging.getLogger(__name__)

AUTO = "auto"
ConcreteDtype = Literal["float32", "bfloat16", "float16"]
CANDIDATES: tuple[str, ...] = ("float32", "bfloat16")
"""What `auto` chooses from on a CPU (float16 has no fast CPU kernels)."""
MIX: Mapping[str, float] = {"forward": 1.0, "backward": 2.0, "decode": 1.0}
"""FLOPs of each probed kind in a run's work, relative to the forward's."""
MIN_SPEEDUP = 1.1
"""How much faster than float32 another dtype must be to be chosen."""
PEARSON_FLOOR = 0.999
"""The least Pearson correlation of bf16 logprobs with float32's for bf16 to be chosen."""
PROBE_ROWS = 256
"""Rows of the probed training micro-batch (tokens); a decode batch has `DECODE_ROWS`."""
DECODE_ROWS = 16
CACHE_VERSION = 1


@dataclass(frozen=True)
class ProbeRates:
    """GFLOP/s of one dtype on the policy's MLP projection."""

    forward: float
    backward: float
    decode: float

    def seconds_per_gflop(self) -> float:
        """The time of `MIX`'s work, per GFLOP of forward."""
        return sum(weight / max(getattr(self, kind), 1e-9) for kind, weight in MIX.items())


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype chosen, why, and what was measured."""

    dtype: str
    reason: str
    rates: dict[str, ProbeRates] = field(default_factory=dict)
    pearson: float | None = None
    cpu: str = ""
    measured: bool = True
    """False when read from the cache or chosen without a measurement (an accelerator)."""

    def speedup(self, dtype: str) -> float | None:
        """How many times float32's rate `dtype` runs the mix at (None: not measured)."""
        if dtype not in self.rates or "float32" not in self.rates:
            return None
        return self.rates["float32"].seconds_per_gflop() / self.rates[dtype].seconds_per_gflop()

    def summary(self) -> str:
        """One line: the choice, its reason and the measured rates."""
        rates = "; ".join(
            f"{name} fwd {r.forward:.1f} bwd {r.backward:.1f} decode {r.decode:.1f} GFLOP/s"
            for name, r in self.rates.items()
        )
        return f"policy.dtype auto -> {self.dtype}: {self.reason}" + (
            f" [{rates}]" if rates else ""
        )

    def params(self) -> dict[str, Any]:
        """Flat values for MLflow (`precision/...`)."""
        values: dict[str, Any] = {"dtype": self.dtype, "reason": self.reason, "cpu": self.cpu}
        if self.pearson is not None:
            values["bf16_logprob_pearson"] = round(self.pearson, 6)
        for name, rates in self.rates.items():
            for kind, rate in asdict(rates).items():
                values[f"{name}_{kind}_gflops"] = round(rate, 2)
        return values

    def to_json(self) -> dict[str, Any]:
        return {
            "dtype": self.dtype,
            "reason": self.reason,
            "rates": {name: asdict(r) for name, r in self.rates.items()},
            "pearson": self.pearson,
            "cpu": self.cpu,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DtypeChoice:
        rates = {name: ProbeRates(**r) for name, r in data["rates"].items()}
        return cls(
            data["dtype"], data["reason"], rates, data["pearson"], data["cpu"], measured=False
        )


def decide(rates: Mapping[str, ProbeRates], pearson: float | None, cpu: str = "") -> DtypeChoice:
    """The dtype `auto` takes given the measured `rates` (float32's among them) and bf16's
    logprob Pearson against float32 (None: not measured, bf16 cannot be chosen)."""
    base = rates["float32"].seconds_per_gflop()
    speedups = {name: base / r.seconds_per_gflop() for name, r in rates.items()}
    fastest = max(speedups, key=lambda name: speedups[name])
    ratio = speedups.get("bfloat16")
    slower = f"; bfloat16 runs at {ratio:.2f}x float32's rate here" if ratio is not None else ""
    if fastest == "float32" or speedups[fastest] < MIN_SPEEDUP:
        why = "no native bf16 matmul on this CPU" if ratio is not None and ratio < 1 else ""
        return DtypeChoice(
            "float32",
            f"fastest on this CPU{slower}" + (f" ({why})" if why else ""),
            dict(rates),
            pearson,
            cpu,
        )
    if fastest == "bfloat16" and (pearson is None or pearson < PEARSON_FLOOR):
        shown = "not measured" if pearson is None else f"{pearson:.5f}"
        return DtypeChoice(
            "float32",
            f"bfloat16 is {speedups[fastest]:.2f}x faster but its logprob Pearson against "
            f"float32 is {shown} (< {PEARSON_FLOOR})",
            dict(rates),
            pearson,
            cpu,
        )
    return DtypeChoice(
        fastest,
        f"{speedups[fastest]:.2f}x float32's rate on this CPU"
        + (f", logprob Pearson {pearson:.5f} against float32" if pearson is not None else ""),
        dict(rates),
        pearson,
        cpu,
    )


def resolve_dtype(dtype: str, policy: str, device: str = "cpu") -> ConcreteDtype:
    """`dtype` itself, or the one `auto` chooses for `policy` on `device`."""
    return cast(ConcreteDtype, choose_dtype(policy, device).dtype if dtype == AUTO else dtype)


def choose_dtype(
    policy: str, device: str = "cpu", *, echo: Callable[[str], None] | None = None
) -> DtypeChoice:
    """The dtype `auto` takes for `policy` on `device`: from the cache, else measured (a few
    seconds) and cached. `echo` receives a line while it measures."""
    if device != "cpu":
        return DtypeChoice("bfloat16", f"native on {device}", measured=False)
    return _choose_on_cpu(policy, echo)


def _choose_on_cpu(policy: str, echo: Callable[[str], None] | None) -> DtypeChoice:
    import torch

    shapes = policy_shapes(policy)
    path = cache_root() / "precision" / f"{_cache_key(torch, shapes)}.json"
    try:
        return DtypeChoice.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if echo is not None:
        echo(
            f"policy.dtype auto: measuring float32 and bfloat16 on {policy}'s shapes on this "
            f"CPU ({cpu_info()[0]}, {cpu_class()}), once"
        )
    rates = {
        dtype: probe_rates(dtype, shapes["hidden"], shapes["intermediate"]) for dtype in CANDIDATES
    }
    pearson = None
    if rates["bfloat16"].seconds_per_gflop() * MIN_SPEEDUP < rates["float32"].seconds_per_gflop():
        pearson = bf16_logprob_pearson(policy)
    choice = decide(rates, pearson, cpu=f"{cpu_info()[0]} ({cpu_class()})")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")  # processes measuring at once
    temporary.write_text(json.dumps(choice.to_json(), indent=1))
    temporary.replace(path)
    return choice


def policy_shapes(policy: str) -> dict[str, int]:
    """The policy's hidden and intermediate sizes and its depth and vocabulary, from its
    config (no weights are loaded)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(prepare_policy(policy))
    return {
        "hidden": int(config.hidden_size),
        "intermediate": int(getattr(config, "intermediate_size", 4 * config.hidden_size)),
        "layers": int(config.num_hidden_layers),
        "vocab": int(config.vocab_size),
    }


def _cache_key(torch: Any, shapes: Mapping[str, int]) -> str:
    digest = hashlib.sha256(cpu_identity().encode())
    digest.update(f"{torch.__version__} {torch.get_num_threads()} {CACHE_VERSION}".encode())
    digest.update(json.dumps(dict(shapes), sort_keys=True).encode())
    return digest.hexdigest()[:20]


def probe_rates(dtype: str, hidden: int, intermediate: int) -> ProbeRates:
    """GFLOP/s of `dtype` on a `hidden x intermediate` projection: `PROBE_ROWS` rows forward,
    their backward (input and weight gradients), and `DECODE_ROWS` rows forward."""
    import torch
    import torch.nn.functional as F

    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(intermediate, hidden, generator=generator).to(torch_dtype)
    rows = torch.randn(PROBE_ROWS, hidden, generator=generator).to(torch_dtype)
    decode = rows[:DECODE_ROWS].clone()
    grad = torch.randn(PROBE_ROWS, intermediate, generator=generator).to(torch_dtype)
    flops = 2.0 * hidden * intermediate

    def forward() -> None:
        with torch.no_grad():
            F.linear(rows, weight)

    def backward() -> None:
        x, w = rows.clone().requires_grad_(True), weight.clone().requires_grad_(True)
        F.linear(x, w).backward(grad)

    def decoding() -> None:
        with torch.no_grad():
            F.linear(decode, weight)

    return ProbeRates(
        forward=PROBE_ROWS * flops / _seconds(forward) / 1e9,
        backward=2 * PROBE_ROWS * flops / _seconds(backward) / 1e9,
        decode=DECODE_ROWS * flops / _seconds(decoding, repeat=20) / 1e9,
    )


def _seconds(work: Callable[[], None], repeat: int = 3) -> float:
    """The best time of `repeat` calls of `work` after one warm-up call."""
    work()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


PEARSON_TEXT = (
    "You are a coding agent. The test `test_parse_empty` fails because `parse` returns None "
    "for an empty string instead of an empty list. Open src/parser.py, find the early return "
    "and change it to `return []`, then run the tests and submit the fix."
)


def bf16_logprob_pearson(policy: str) -> float:
    """Pearson correlation of the policy's next-token logprobs on `PEARSON_TEXT` computed in
    bf16 (the body in bf16, the head as `lm_head.head_logits` computes it) with float32's."""
    import copy

    import torch

    from uni_agent_core.models.lm_head import head_logits
    from uni_agent_core.models.registry import load_policy

    model, tokenizer = load_policy(policy, dtype="float32")
    ids = torch.tensor([tokenizer(PEARSON_TEXT)["input_ids"]])
    half = copy.deepcopy(model).to(torch.bfloat16)
    values = []
    with torch.no_grad():
        for body in (model, half):
            hidden = body.get_decoder()(ids).last_hidden_state
            logits = head_logits(body.get_output_embeddings(), hidden)[0, :-1]
            values.append(logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0].double())
    stacked = torch.stack(values)
    return float(torch.corrcoef(stacked)[0, 1])
