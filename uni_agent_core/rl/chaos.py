"""A chaos run: training steps through the real rollout path while chosen calls fail.

The episodes run through the embedded gateway, the ReAct harness, local sandboxes started
through the run's pool (`envs/verifier.py::TaskSandboxes`) and the verifier, with a scripted
engine (`FixingPolicy`: no model runs; it fixes every other task with its gold patch and submits
the rest at once, so rewards are 1 and 0) and a trainer that only records what it is given.
Faults are drawn per call from `Faults`, with a seeded generator:

- a sandbox start fails (`SandboxError`) or is slow;
- a started sandbox dies at one of its first commands (that command and every later call
  raise `SandboxError`);
- a model call fails in the engine (the gateway answers 500; the client may retry);
- a task's hidden tests hang past `reward.test_timeout_s` (the verifier times out);
- a task's episodes are played by the adversary (`rl/adversary.py`): a scripted agent that,
  from inside its sandbox, tries to end its session, open and flood sessions, read the
  operational endpoints, probe other sessions, hold hundreds of connections and lock its files
  against cleanup. Its sandboxes link to the gateway (`network: gateway`) where bubblewrap runs.

`run_chaos` trains `steps` steps in two calls of the step loop (the second resumes from the
first one's checkpoint record) and returns a `ChaosReport`: every episode's outcome, the faults
that fired, the pool's counts, what each step's metrics said, the sessions the gateway opened,
and what outlived the run. Used by
`tests/core/rl/test_chaos.py` (small) and `bench/chaos.py` (>= 256 episodes).
"""

from __future__ import annotations

import asyncio
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uni_agent_core.config.harness import BlackboxHarnessConfig
from uni_agent_core.sandbox.base import ExecResult, Sandbox, SandboxError
from uni_agent_core.sandbox.local import SANDBOX_DIR_PREFIX
from uni_agent_core.types import RolloutResult, TaskSpec

CHAOS_RECIPE_OVERRIDES = (
    "gateway.sampling.max_tokens=1024",
    "harness.max_turns=2",
    "reward.test_timeout_s=10",
    "sandbox.start_backoff_s=0.01",
    "sandbox.start_retries=2",
    "trainer.mode=sync",
)
"""The chaos run's setting over `recipes/ci-smoke.yaml`: short episodes (room for a gold patch
in one reply), fast retries, and a test timeout that hanging tests meet but honest ones do not
on a loaded host: at 1 s a CI host with both test workers busy timed out an honest run."""


@dataclass(frozen=True)
class Faults:
    """How often each kind of fault fires (probabilities per call, drawn with `seed`)."""

    start_failure: float = 0.0
    """A sandbox start attempt raises `SandboxError`."""
    slow_start_s: float = 0.0
    """Every sandbox start waits this long first."""
    dies: float = 0.0
    """A started sandbox dies at one of its first four commands."""
    engine_error: float = 0.0
    """A model call raises in the engine."""
    hanging_tests: float = 0.0
    """A task's hidden tests hang (each task drawn once)."""
    adversarial: float = 0.0
    """A task's episodes are played by the adversary (each task drawn once; bubblewrap
    sandboxes only: unconfined, it would lock files outside its sandbox)."""
    seed: int = 0


class FaultInjector:
    """Draws the faults and counts those that fired, by kind."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        self.random = random.Random(faults.seed)
        self.fired: Counter[str] = Counter()

    def draw(self, kind: str) -> bool:
        """Whether a fault of `kind` fires on this call (counted when it does)."""
        fires = self.random.random() < getattr(self.faults, kind)
        if fires:
            self.fired[kind] += 1
        return fires


class FixingPolicy:
    """The scripted engine's replies: for a task in `fixable`, one shell call that applies its
    gold patch, then `submit`; for any other, `submit` at once. The task is recognised by its
    statement in the prompt."""

    DONE = "agent-rl-scripted-fix-applied"
    """Echoed after the patch: once the prompt shows it, the policy submits."""

    def __init__(self, tasks: Sequence[TaskSpec], fixable: set[str]) -> None:
        self.tasks = list(tasks)
        self.fixable = fixable

    def __call__(self, index: int, prompt: str) -> str:
        from uni_agent_core.rl.sft import tool_call

        task = next((t for t in self.tasks if t.problem_statement in prompt), None)
        if task is None or task.instance_id not in self.fixable or self.DONE in prompt:
            return tool_call("submit", {})
        command = f"git apply <<'PATCH'\n{task.patch}PATCH\necho {self.DONE}"
        return tool_call("shell", {"command": command})


class FaultySandbox:
    """A sandbox whose start may fail or be slow, and which may die mid-episode."""

    def __init__(self, inner: Sandbox, injector: FaultInjector) -> None:
        self.inner = inner
        self.injector = injector
        self.dies_at: int | None = None
        self.commands = 0
        self.dead = False

    async def start(self) -> None:
        if self.injector.faults.slow_start_s:
            await asyncio.sleep(self.injector.faults.slow_start_s)
        if self.injector.draw("start_failure"):
            raise SandboxError("injected: the sandbox failed to start")
        await self.inner.start()
        if self.injector.random.random() < self.injector.faults.dies:
            self.dies_at = self.injector.random.randint(1, 4)

    async def exec(self, command: str, **kwargs: Any) -> ExecResult:
        self._check_alive()
        self.commands += 1
        if self.commands == self.dies_at:
            self.dead = True
            self.injector.fired["dies"] += 1
            await self.inner.close()
            raise SandboxError("injected: the sandbox died")
        return await self.inner.exec(command, **kwargs)

    async def read_file(self, path: str) -> str:
        self._check_alive()
        return await self.inner.read_file(path)

    async def write_file(self, path: str, content: str) -> None:
        self._check_alive()
        await self.inner.write_file(path, content)

    async def diff(self) -> str:
        self._check_alive()
        return await self.inner.diff()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _check_alive(self) -> None:
        if self.dead:
            raise SandboxError("the sandbox is dead")


class ChaosTrainer:
    """Records each step's episodes (one policy version per step); trains nothing."""

    def __init__(self) -> None:
        self.version = 0
        self.model = self.optimizer = None
        self.trained: list[list[RolloutResult]] = []

    def train_step(self, results: Sequence[RolloutResult]) -> Any:
        from uni_agent_core.rl.trainer import StepOutcome

        self.trained.append(list(results))
        self.version += 1
        return StepOutcome(updated=True, metrics={})

    def engine_state(self) -> dict[str, Any]:
        return {}


@dataclass
class ChaosReport:
    """What a chaos run did."""

    episodes: list[RolloutResult]
    """Every episode the trainer was given, over both calls of the step loop."""
    launched_groups: int
    """Groups the driver launched over the run."""
    fired: Counter[str]
    """Faults that fired, by kind."""
    pool: dict[str, int]
    """The sandbox pool's counters at the end (`PoolStats`)."""
    max_concurrent_starts: int
    step_metrics: list[dict[str, float]]
    seconds: float
    leftover_sandboxes: list[str] = field(default_factory=list)
    """This process's local sandbox directories still on disk after the run."""
    leftover_processes: list[int] = field(default_factory=list)
    """Child processes of this one started during the run and still alive after it."""
    leftover_cgroups: list[str] = field(default_factory=list)
    """This process's sandbox cgroups still present after the run (where cgroups are used)."""
    hanging_tasks: set[str] = field(default_factory=set)
    adversarial_tasks: set[str] = field(default_factory=set)
    sessions_created: int = 0
    """Sessions the gateway opened over the run (the driver opens one per episode)."""
    sessions_left: int = 0
    """Sessions still open when the run ended."""

    def outcomes(self) -> Counter[str]:
        return Counter(result.exit_reason.value for result in self.episodes)


def _children() -> list[int]:
    """Live child processes of this process (from /proc)."""
    me, children = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and fields[0] != "Z":
            children.append(int(entry.name))
    return children


def _own_cgroups() -> list[str]:
    """This process's sandbox cgroups (`agent-rl-<pid>-*`) under the controller mounts."""
    from uni_agent_core.sandbox.limits import controller_mounts

    pattern = f"agent-rl-{os.getpid()}-*"
    return sorted(
        str(path) for root in controller_mounts().values() for path in root.rglob(pattern)
    )


async def run_chaos(
    *,
    recipe_path: Path,
    faults: Faults,
    steps: int,
    batch_size: int,
    group_size: int,
    max_concurrent_starts: int,
    work: Path,
    overrides: Sequence[str] = (),
    adversary: BlackboxHarnessConfig | None = None,
) -> ChaosReport:
    """Train `steps` steps of `batch_size` groups of `group_size` under `faults` (see the module
    docstring); the step loop stops after half the steps and a second one resumes from the
    first one's checkpoint record. `adversary`: the adversarial tasks' harness
    (`adversary_harness()` when None)."""
    from uni_agent_core.config import load_recipe
    from uni_agent_core.curriculum.task_sampler import EpochSampler
    from uni_agent_core.envs.verifier import TaskSandboxes
    from uni_agent_core.gateway.embedded import serving_gateway
    from uni_agent_core.inference.scripted import ScriptedEngine
    from uni_agent_core.rl.adversary import adversary_harness
    from uni_agent_core.rl.step_loop import StepLoop
    from uni_agent_core.rl.step_records import Checkpointer, RunSummary, StepRecorder
    from uni_agent_core.rollout.build import (
        build_session_manager,
        build_tasks,
        build_tokenizer,
    )
    from uni_agent_core.rollout.driver import RolloutDriver

    recipe = load_recipe(
        recipe_path,
        [
            *CHAOS_RECIPE_OVERRIDES,
            f"tasks.n={batch_size * steps}",
            f"trainer.batch_size={batch_size}",
            f"trainer.group_size={group_size}",
            f"trainer.total_steps={steps}",
            f"sandbox.max_concurrent_starts={max_concurrent_starts}",
            *overrides,
        ],
    )
    if faults.adversarial and getattr(recipe.sandbox, "isolation", None) != "bubblewrap":
        raise ValueError("the adversary plays only in bubblewrap sandbox (sandbox.isolation)")
    injector = FaultInjector(faults)
    tasks = {task.instance_id: task for task in build_tasks(recipe)}
    hanging = {task_id for task_id in sorted(tasks) if injector.draw("hanging_tests")}
    for task_id in hanging:
        tasks[task_id] = tasks[task_id].model_copy(update={"test_cmd": "sleep 600"})
    adversarial = {
        task_id
        for task_id in (sorted(tasks) if faults.adversarial else ())  # no draws: same faults
        if injector.draw("adversarial")
    }
    attacker = (adversary or adversary_harness()).model_dump(mode="json")
    for task_id in adversarial:
        tasks[task_id] = tasks[task_id].model_copy(update={"harness": attacker})

    class FaultyEngine(ScriptedEngine):
        async def generate(self, request: Any) -> Any:
            if injector.draw("engine_error"):
                raise RuntimeError("injected: the engine failed")
            return await super().generate(request)

    tokenizer = build_tokenizer(recipe)
    engine = FaultyEngine(tokenizer)
    engine.respond = FixingPolicy(list(tasks.values()), set(sorted(tasks)[::2]))
    manager = build_session_manager(recipe, engine, tokenizer)
    trainer = ChaosTrainer()
    saved: list[dict[str, Any]] = []

    class RecordingCheckpointer(Checkpointer):
        def save(self, step: int, **state: Any) -> Path:
            saved.append({"step": step, **{k: v for k, v in state.items() if k != "model"}})
            return work / f"step-{step}"

    children_before = set(_children())  # a caller's own servers are not the run's
    started = time.perf_counter()
    summary = RunSummary(run_dir=work, start_step=0, steps=0)
    async with serving_gateway(manager) as url:
        driver = RolloutDriver.for_recipe(
            recipe, manager=manager, gateway_url=url, max_concurrency=batch_size * group_size
        )
        pool_factory = driver.sandbox_factory
        assert isinstance(pool_factory, TaskSandboxes)  # what `for_recipe` builds
        real_build = pool_factory.build

        def faulty_build(task: TaskSpec) -> Any:
            return FaultySandbox(real_build(task), injector)

        pool_factory.build = faulty_build  # type: ignore[method-assign]
        sampler = EpochSampler(sorted(tasks), seed=0)
        launched, pending = 0, []
        for start_step, stop_after in ((0, steps // 2), (steps // 2, steps - steps // 2)):
            if saved:
                state = saved[-1]
                sampler.load_state_dict(state["sampler_state"])
                pending, launched = list(state["pending"]), state["launched"] - len(pending)
            loop = StepLoop(
                recipe.trainer,
                tasks=tasks,
                driver=driver,
                trainer=trainer,  # type: ignore[arg-type]
                engine=engine,
                sampler=sampler,
                recorder=StepRecorder(work, summary, total_steps=steps, echo=lambda line: None),
                checkpointer=RecordingCheckpointer(
                    work, interval=1, total_steps=steps, keep=1, run_name="chaos"
                ),
                seed=0,
                pending=pending,
                launched=launched,
                stop_after_steps=stop_after,
            )
            await loop.run(start_step)
            launched_total = loop.launched
        sessions_left = len(manager)  # before the gateway closes what is left
    seconds = time.perf_counter() - started
    await asyncio.sleep(0.1)  # let killed processes be reaped
    return ChaosReport(
        episodes=[result for step in trainer.trained for result in step],
        launched_groups=launched_total,
        fired=injector.fired,
        pool=dict(vars(pool_factory.pool.stats)),
        max_concurrent_starts=max_concurrent_starts,
        step_metrics=summary.metrics,
        seconds=seconds,
        leftover_sandboxes=sorted(
            path.name
            for path in Path(tempfile.gettempdir()).glob(f"{SANDBOX_DIR_PREFIX}{os.getpid()}-*")
        ),
        leftover_processes=[pid for pid in _children() if pid not in children_before],
        leftover_cgroups=_own_cgroups(),
        hanging_tasks=hanging,
        adversarial_tasks=adversarial,
        sessions_created=manager.metrics.sessions_created,
        sessions_left=sessions_left,
    )
