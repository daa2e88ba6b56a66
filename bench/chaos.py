"""A chaos run and an adversarial run at scale against a fault-free run of the same size
(`rl/chaos.py`).

    python bench/chaos.py [--steps 4] [--batch 8] [--group 8] [--cap 16] [--adversarial 0.25]

Four runs, each of `--steps` steps of `--batch` groups of `--group` episodes (256 by default)
through the embedded gateway, the ReAct harness, local sandboxes started through the run's pool
(at most `--cap` at once) and the verifier, with a scripted engine; the step loop stops half-way
and resumes. The chaos run's faults: 20% of sandbox starts fail, every start takes 50 ms more,
15% of sandboxes die at one of their first commands, 5% of model calls fail in the engine, and
the hidden tests of 20% of the tasks hang past a 10 s test timeout.

"fault-free" and "chaos" compare the faults above. "honest" and "adversarial" compare the
adversary: in "adversarial" a share of the tasks (`--adversarial`) is played by the adversary
(`rl/adversary.py`), which attacks the gateway's control plane, the sandbox link and its own
cleanup from inside its sandbox; neither has another fault, and both give hidden tests 60 s.

Printed per run: episodes, outcomes by kind, faults fired, the pool's counts (start attempts,
failures, retries, given up, most starts at once), what outlived the run, wall seconds, and the
checks: every episode recorded once, the sandbox errors equal to the sandboxes that died plus
the starts given up on, starts within the cap, nothing left behind; for the adversarial run,
every adversarial episode scored 0, every honest episode ended with the outcome and reward it
had in the same run without adversaries ("honest"), and the gateway opened one session per
episode.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
from pathlib import Path

from uni_agent_core.rl.chaos import ChaosReport, Faults, run_chaos

ROOT = Path(__file__).resolve().parents[1]
CHAOS = Faults(
    start_failure=0.2, slow_start_s=0.05, dies=0.15, engine_error=0.05, hanging_tests=0.2, seed=7
)


HONEST_TESTS = ("reward.test_timeout_s=60",)
"""The adversarial run and its adversary-free twin keep hidden tests to a timeout no busy host
reaches (real test runs under load passed the chaos setting's timeout when it was 1 s), so an honest
episode's outcome depends on the episode alone."""


def run(faults: Faults, args: argparse.Namespace, *overrides: str) -> ChaosReport:
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    work = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    try:
        return asyncio.run(
            run_chaos(
                recipe_path=ROOT / "recipes" / "ci-smoke.yaml",
                faults=faults,
                steps=args.steps,
                batch_size=args.batch,
                group_size=args.group,
                max_concurrent_starts=args.cap,
                work=work,
                overrides=[f"sandbox.isolation={isolation}", *overrides],
            )
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def checks(report: ChaosReport, expected: int) -> dict[str, bool]:
    keys = {(r.group_id, r.sample_index) for r in report.episodes}
    pool = report.pool
    return {
        "every episode once": len(report.episodes) == expected == len(keys),
        "sandbox errors = died + given up": report.outcomes()["sandbox_error"]
        == report.fired["dies"] + pool["exhausted"],
        "failures = retries + given up": pool["start_failures"]
        == pool["retries"] + pool["exhausted"],
        "starts within the cap": pool["starting_peak"] <= report.max_concurrent_starts,
        "every sandbox closed": pool["closed"] == pool["start_attempts"],
        "nothing left behind": not (
            report.leftover_sandboxes or report.leftover_processes or report.leftover_cgroups
        ),
    }


def honest_outcomes(report: ChaosReport) -> dict[tuple[str, int], tuple[str, float]]:
    """(group, sample) -> (exit, reward) of the episodes the adversary did not play."""
    return {
        (r.group_id, r.sample_index): (r.exit_reason.value, r.reward)
        for r in report.episodes
        if r.task_id not in report.adversarial_tasks
    }


def baseline_reward(baseline: ChaosReport, report: ChaosReport) -> float:
    """`baseline`'s reward over the episodes `report` played honestly."""
    honest = honest_outcomes(report)
    return sum(reward for key, (_, reward) in honest_outcomes(baseline).items() if key in honest)


def adversarial_checks(
    report: ChaosReport, baseline: ChaosReport, expected: int
) -> dict[str, bool]:
    keys = {(r.group_id, r.sample_index) for r in report.episodes}
    honest = honest_outcomes(report)
    return {
        "every episode once": len(report.episodes) == expected == len(keys),
        "adversarial episodes score 0": all(
            r.reward == 0.0 for r in report.episodes if r.task_id in report.adversarial_tasks
        ),
        "honest episodes as without adversaries": bool(honest)
        and honest == {k: v for k, v in honest_outcomes(baseline).items() if k in honest},
        "one session per episode": report.sessions_created == len(report.episodes),
        "nothing left behind": not (
            report.leftover_sandboxes
            or report.leftover_processes
            or report.leftover_cgroups
            or report.sessions_left
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="groups per step")
    parser.add_argument("--group", type=int, default=8, help="episodes per group")
    parser.add_argument("--cap", type=int, default=16, help="sandbox starts at once")
    parser.add_argument(
        "--adversarial", type=float, default=0.25, help="share of tasks the adversary plays"
    )
    args = parser.parse_args()
    expected = args.steps * args.batch * args.group
    reports = {}
    adversarial = Faults(adversarial=args.adversarial, seed=7)
    runs = [("fault-free", Faults(), ()), ("chaos", CHAOS, ())]
    if shutil.which("bwrap") and shutil.which("socat"):
        runs += [("honest", Faults(), HONEST_TESTS), ("adversarial", adversarial, HONEST_TESTS)]
    else:
        print("no bubblewrap or socat here: the adversarial runs are skipped", flush=True)
    for name, faults, overrides in runs:
        print(f"{name}: {expected} episodes ...", flush=True)
        reports[name] = run(faults, args, *overrides)
    print()
    print(f"{'':<34}" + "".join(f"{name:>14}" for name in reports))
    rows: list[tuple[str, object, object]] = [
        ("episodes", *(len(r.episodes) for r in reports.values())),
        ("seconds", *(f"{r.seconds:.1f}" for r in reports.values())),
    ]
    outcomes = sorted({k for r in reports.values() for k in r.outcomes()})
    rows += [(f"outcome {k}", *(r.outcomes()[k] for r in reports.values())) for k in outcomes]
    kinds = sorted({k for r in reports.values() for k in r.fired})
    rows += [(f"fired {k}", *(r.fired[k] for r in reports.values())) for k in kinds]
    for key in ("start_attempts", "start_failures", "retries", "exhausted", "starting_peak"):
        rows.append((f"pool {key}", *(r.pool[key] for r in reports.values())))
    honest = reports.get("honest", reports["fault-free"])
    rows += [
        ("adversarial tasks", *(len(r.adversarial_tasks) for r in reports.values())),
        (
            "adversarial episodes",
            *(sum(e.task_id in r.adversarial_tasks for e in r.episodes) for r in reports.values()),
        ),
        (
            "honest reward sum",
            *(f"{sum(v[1] for v in honest_outcomes(r).values()):g}" for r in reports.values()),
        ),
        (
            "same episodes, adversary-free",
            *(f"{baseline_reward(honest, r):g}" for r in reports.values()),
        ),
        ("gateway sessions opened", *(r.sessions_created for r in reports.values())),
        (
            "left behind (dirs, procs, cgroups, sessions)",
            *(
                f"{len(r.leftover_sandboxes)}, {len(r.leftover_processes)}, "
                f"{len(r.leftover_cgroups)}, {r.sessions_left}"
                for r in reports.values()
            ),
        ),
    ]
    for label, *values in rows:
        print(f"{label:<34}" + "".join(f"{value!s:>14}" for value in values))
    for name, baseline in (("chaos", "fault-free"), ("adversarial", "honest")):
        if name not in reports:
            continue
        ratio = reports[name].seconds / reports[baseline].seconds
        print(f"{name} / {baseline} wall time: {ratio:.2f}x")
    for name, report in reports.items():
        found = (
            adversarial_checks(report, honest, expected)
            if name == "adversarial"
            else checks(report, expected)
        )
        failed = [check for check, ok in found.items() if not ok]
        print(f"{name}: {'all checks hold' if not failed else 'FAILED: ' + ', '.join(failed)}")


if __name__ == "__main__":
    main()
