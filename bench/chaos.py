"""A chaos run at scale against a fault-free run of the same size (`rl/chaos.py`).

    python bench/chaos.py [--steps 4] [--batch 8] [--group 8] [--cap 16]

Both runs train `--steps` steps of `--batch` groups of `--group` episodes (256 by default)
through the embedded gateway, the ReAct harness, local sandboxes started through the run's pool
(at most `--cap` at once) and the verifier, with a scripted engine; the step loop stops half-way
and resumes. The chaos run's faults: 20% of sandbox starts fail, every start takes 50 ms more,
15% of sandboxes die at one of their first commands, 5% of model calls fail in the engine, and
the hidden tests of 20% of the tasks hang past a 1 s test timeout.

Printed per run: episodes, outcomes by kind, faults fired, the pool's counts (start attempts,
failures, retries, given up, most starts at once), what outlived the run, wall seconds, and the
checks: every episode recorded once, the sandbox errors equal to the sandboxes that died plus
the starts given up on, starts within the cap, nothing left behind.
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


def run(faults: Faults, args: argparse.Namespace) -> ChaosReport:
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
                overrides=[f"sandbox.isolation={isolation}"],
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="groups per step")
    parser.add_argument("--group", type=int, default=8, help="episodes per group")
    parser.add_argument("--cap", type=int, default=16, help="sandbox starts at once")
    args = parser.parse_args()
    expected = args.steps * args.batch * args.group
    reports = {}
    for name, faults in (("fault-free", Faults()), ("chaos", CHAOS)):
        print(f"{name}: {expected} episodes ...", flush=True)
        reports[name] = run(faults, args)
    print()
    print(f"{'':<34}{'fault-free':>14}{'chaos':>14}")
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
    rows.append(
        (
            "left behind (dirs, procs, cgroups)",
            *(
                f"{len(r.leftover_sandboxes)}, {len(r.leftover_processes)}, "
                f"{len(r.leftover_cgroups)}"
                for r in reports.values()
            ),
        )
    )
    for label, free, chaos in rows:
        print(f"{label:<34}{free!s:>14}{chaos!s:>14}")
    ratio = reports["chaos"].seconds / reports["fault-free"].seconds
    print(f"chaos / fault-free wall time: {ratio:.2f}x")
    for name, report in reports.items():
        failed = [check for check, ok in checks(report, expected).items() if not ok]
        print(f"{name}: {'all checks hold' if not failed else 'FAILED: ' + ', '.join(failed)}")


if __name__ == "__main__":
    main()
