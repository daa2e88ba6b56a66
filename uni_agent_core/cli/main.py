"""The `agent-rl` console script: a thin argparse front over the library.

Each sub-command parses its arguments and calls one library function; no logic lives here.
`main` is the one place errors meet the terminal: a `UserError` (a bad recipe or flag, a file
the user named that cannot be read, a model or tool not prepared on this host) and argparse's
usage errors are `error:` lines and exit 2, Ctrl-C one `interrupted` line and exit 130; anything
else is a bug or a failed run and keeps its traceback (exit 1). Commands catch only to report a
run that failed on its own terms (a server that did not start, verl's trainer exiting with an
error) as one line and exit 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from uni_agent_core.errors import UserError
from uni_agent_core.models import resolve_policy
from uni_agent_core.plugins import ENTRY_POINT_GROUPS

USAGE_ERROR = 2
"""Exit status of a user error: a `UserError`, or argparse's own usage error."""

RUN_FAILED = 1
"""Exit status of a run that failed on its own terms (reported as one line, no traceback)."""

INTERRUPTED = 130
"""Exit status after Ctrl-C (128 + SIGINT, as shells report it)."""


def _cmd_recipe_validate(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.recipes import load_recipe_here
    from uni_agent_core.config.loading import validate_paths

    return validate_paths(
        args.paths, out=sys.stdout, err=sys.stderr, overrides=args.set, load=load_recipe_here
    )


def _cmd_models_prepare(args: argparse.Namespace) -> int:
    from uni_agent_core.models import prepare_policy

    for name in args.names:
        path = prepare_policy(name, force=args.force)
        print(f"{name}: ready at {path}")
    return 0


def _cmd_models_list(args: argparse.Namespace) -> int:
    from uni_agent_core.models import describe_policies

    for line in describe_policies():
        print(line)
    return 0


def _cmd_plugins_list(args: argparse.Namespace) -> int:
    from uni_agent_core.plugins import installed

    rows = installed(args.kind)
    width = max((len(row.name) for row in rows), default=0)
    for kind in [args.kind] if args.kind else list(ENTRY_POINT_GROUPS):
        print(f"{kind} (entry points: {ENTRY_POINT_GROUPS[kind]})")
        mine = [row for row in rows if row.kind == kind]
        for row in mine:
            print(f"  {row.name:<{width}}  {row.target}  [{row.origin}]")
        if not mine:
            print("  none: a recipe names yours by `package.module:attribute`")
    return 0


def _cmd_init_env(args: argparse.Namespace) -> int:
    from pathlib import Path

    from uni_agent_core.envs.scaffold import scaffold_environment

    written = scaffold_environment(args.name, Path(args.dir))
    root = written[0].parent
    print(f"wrote the task environment package {args.name} in {root}:")
    for path in written:
        print(f"  {path.relative_to(root)}")
    print(f"next: pip install -e {root} && python -m pytest {root / 'tests'}")
    print(f"      agent-rl train --recipe {root / 'recipe.yaml'} --run-dir runs/{args.name}")
    return 0


def _cmd_agents(args: argparse.Namespace) -> int:
    from pathlib import Path

    from uni_agent_core.harness.agent_clis import AGENT_CLIS, default_prefix, install

    prefix = Path(args.prefix).resolve() if args.prefix else default_prefix()
    unknown = sorted(set(args.names) - set(AGENT_CLIS))
    if unknown:
        raise UserError(f"unknown agent CLI {unknown}; known: {', '.join(AGENT_CLIS)}")
    clis = [AGENT_CLIS[name] for name in (args.names or AGENT_CLIS)]
    if args.agents_command == "install":
        print(f"installing {', '.join(c.title for c in clis)} with npm into {prefix}", flush=True)
        for line in install(clis, prefix):
            print(line)
        return 0
    for cli in clis:
        installed = cli.installed_version(prefix)
        state = "not installed" if installed is None else f"installed {installed}"
        print(f"{cli.name}: {cli.title} {cli.package}@{cli.version} (pinned), {state} in {prefix}")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    import signal
    import threading
    from pathlib import Path

    from uni_agent_core.cli.recipes import load_recipe_here
    from uni_agent_core.inference.servers import ServerStartError
    from uni_agent_core.rl.serve import serve_policy
    from uni_agent_core.rundir.layout import default_run_dir

    recipe = load_recipe_here(args.recipe, list(args.set))
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(recipe)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        with serve_policy(recipe, run_dir, args.checkpoint) as served:
            for url in served.base_urls:
                print(f"{url}/v1  model {served.servers.spec.served_name}")
            print("serving; Ctrl-C or SIGTERM stops the servers", flush=True)
            stopped.wait()
    except ServerStartError as error:  # the message quotes the server's log
        print(f"error: {error}", file=sys.stderr)
        return RUN_FAILED
    return 0


def _cmd_chat(args: argparse.Namespace) -> int:
    from uni_agent_core.inference.chat import chat_once

    return chat_once(
        model=args.model,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
    )


def _gateway_overlay(args: argparse.Namespace, recipe: Any) -> list[str]:
    """`agent-rl gateway serve`'s flags as recipe overrides (applied after `--set`)."""
    from uni_agent_core.config.loading import format_override

    overlay: list[str] = []
    if args.model:
        overlay.append(format_override("policy.name", args.model))
    if args.engine == "hf" and recipe.engine.type != "hf":
        overlay.append(format_override("engine", {"type": "hf"}))
    elif args.engine == "openai_server":
        engine = {
            "type": "openai_server",
            "api": args.server_api,
            "base_urls": args.engine_url,
            "model": args.served_model or args.model or recipe.policy.name,
        }
        overlay += [
            format_override("engine", engine),
            format_override("router.replicas", len(args.engine_url)),
        ]
    for key, value in (
        ("gateway.session_ttl_s", args.session_ttl_s),
        ("gateway.max_total_tokens", args.max_total_tokens),
        ("gateway.host", args.host),
        ("gateway.port", args.port),
    ):
        if value is not None:
            overlay.append(format_override(key, value))
    return overlay + _context_overlay(args.max_total_tokens, recipe)


def _context_overlay(max_total_tokens: int | None, recipe: Any) -> list[str]:
    """Room for `--max-total-tokens` in the training context when the recipe never set it.

    Sessions may not outgrow `trainer.max_context_tokens`; an explicit flag must not be refused
    by that field's default, so the context grows to fit. A context the recipe or `--set` gave
    stays, and a flag above it is refused by the recipe's own rule.
    """
    trainer = recipe.trainer
    if (
        max_total_tokens is None
        or "max_context_tokens" in trainer.model_fields_set
        or max_total_tokens <= trainer.max_context_tokens
    ):
        return []
    from uni_agent_core.config.loading import format_override

    return [format_override("trainer.max_context_tokens", max_total_tokens)]


def _cmd_gateway_serve(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.recipes import require_policy
    from uni_agent_core.config.loading import parse_recipe, read_recipe_data
    from uni_agent_core.gateway.launch import serve
    from uni_agent_core.rollout.build import build_engine, build_session_manager

    if args.engine == "openai_server" and not args.engine_url:
        raise UserError("--engine openai_server needs --engine-url URL (repeatable)")
    data = read_recipe_data(args.recipe) if args.recipe else {"name": "gateway"}
    source = args.recipe or "<gateway serve>"
    given = parse_recipe(data, list(args.set), source=source)
    recipe = parse_recipe(data, [*args.set, *_gateway_overlay(args, given)], source=source)
    require_policy(recipe, source=source)  # the gateway loads the policy's tokenizer here
    manager = build_session_manager(recipe, build_engine(recipe))
    serve(
        manager,
        host=recipe.gateway.host,
        port=recipe.gateway.port,
        model_name=recipe.policy.name,
    )
    return 0


def _cmd_gateway_demo(args: argparse.Namespace) -> int:
    from uni_agent_core.gateway.demo import run_demo

    return run_demo(model=args.model, turns=args.turns)


def _data_sandbox(args: argparse.Namespace):  # noqa: ANN202 - SandboxConfig
    from uni_agent_core.config.sandbox import LocalSandboxConfig

    if args.recipe:
        from uni_agent_core.config import load_recipe

        return load_recipe(args.recipe, list(args.set)).sandbox
    return LocalSandboxConfig(isolation=args.isolation)


def _cmd_data_generate(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.data import generate_micro_swe

    levels = [level.strip() for level in args.levels.split(",") if level.strip()]
    return generate_micro_swe(
        args.n, args.seed, args.out, levels, args.split, key_file=args.key_file
    )


def _cmd_data_validate(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.data import validate_data

    return validate_data(
        args.path,
        out=args.out,
        reruns=args.reruns,
        timeout_s=args.timeout_s,
        concurrency=args.concurrency,
        sandbox=_data_sandbox(args),
        split=args.split,
    )


def _cmd_data_oracle(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.data import oracle_score

    return oracle_score(
        args.path, concurrency=args.concurrency, sandbox=_data_sandbox(args), split=args.split
    )


def _cmd_curriculum_estimate(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.curriculum import estimate
    from uni_agent_core.cli.recipes import load_recipe_here

    recipe = load_recipe_here(args.recipe, list(args.set))
    return estimate(recipe, n=args.n, max_tasks=args.max_tasks, out=args.out, run_dir=args.run_dir)


def _cmd_curriculum_refresh(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.curriculum import refresh
    from uni_agent_core.cli.recipes import load_recipe_here

    recipe = load_recipe_here(args.recipe, list(args.set))
    return refresh(recipe, n=args.n, checkpoint=args.checkpoint, out=args.out, run_dir=args.run_dir)


def _add_curriculum_parser(sub: argparse._SubParsersAction) -> None:
    curriculum = sub.add_parser("curriculum", help="Best-of-N difficulty and curriculum refresh")
    curriculum_sub = curriculum.add_subparsers(dest="curriculum_command", required=True)
    estimate = curriculum_sub.add_parser(
        "estimate", help="Best-of-N rollouts per task: difficulty.json and difficulty.md"
    )
    estimate.add_argument("--n", type=int, default=None, help="samples per task (recipe default)")
    estimate.add_argument("--max-tasks", type=int, default=None, help="first K tasks only")
    estimate.set_defaults(func=_cmd_curriculum_estimate)
    refresh = curriculum_sub.add_parser(
        "refresh", help="probe with the latest checkpoint and publish a new curriculum version"
    )
    refresh.add_argument("--n", type=int, default=2, help="fresh probes per task (0: none)")
    refresh.add_argument(
        "--checkpoint",
        choices=["auto", "none"],
        default="auto",
        help="probe with the newest complete checkpoint (auto) or the base policy (none)",
    )
    refresh.set_defaults(func=_cmd_curriculum_refresh)
    for command in (estimate, refresh):
        command.add_argument("--recipe", required=True, help="recipe YAML")
        command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        command.add_argument("--run-dir", help="the run directory (default runs/<recipe name>)")
        command.add_argument("--out", help="output directory (default <run dir>/curriculum)")


def _cmd_eval(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.eval import evaluate_command
    from uni_agent_core.cli.recipes import load_recipe_here

    recipe = load_recipe_here(args.recipe, list(args.set))
    return evaluate_command(
        recipe,
        suite=args.suite,
        checkpoint=args.checkpoint,
        k=args.k,
        oracle=args.oracle,
        out=args.out,
        max_tasks=args.max_tasks,
        data=args.data,
        concurrency=args.concurrency,
        run_dir=args.run_dir,
        track=not args.no_track,
    )


def _cmd_compare(args: argparse.Namespace) -> int:
    from uni_agent_core.tracking.compare import compare_runs

    comparison = compare_runs(args.run_ids, tracking_uri=args.tracking_uri, plot_path=args.plot)
    print(comparison.markdown())
    print(f"curves: {comparison.plot}")
    return 0


def _cmd_view(args: argparse.Namespace) -> int:
    from uni_agent_core.cli.view import view_command

    return view_command(
        args.target,
        step=args.step,
        out=args.out,
        port=args.port,
        tracking_uri=args.tracking_uri,
        mlflow_ui=args.mlflow_ui,
        experiment_id=args.experiment_id,
    )


def _cmd_stack(args: argparse.Namespace) -> int:
    from pathlib import Path

    from uni_agent_core import prefect_stack

    project = Path(args.project).resolve()
    if args.stack_command == "up":
        prefect_stack.up(project, port=args.port)
    elif args.stack_command == "down":
        prefect_stack.down(project)
    elif args.stack_command == "env":
        return 0 if prefect_stack.print_env(project) else 1
    else:
        prefect_stack.status(project)
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    import os

    from uni_agent_core.config import load_recipe
    from uni_agent_core.tracking.runs import describe_run, latest_run

    recipe = load_recipe(args.recipe, list(args.set))
    summary = latest_run(recipe)
    print(describe_run(summary, os.environ.get("PREFECT_API_URL")))
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    """The pipeline of an embedded recipe in this process (`pipeline/run.py`: the stages of the
    flow `agent-rl/train`); verl's trainer alone for a verl recipe, whose other stages run on
    served policies in the flow."""
    from pathlib import Path

    from uni_agent_core.cli.recipes import load_recipe_here
    from uni_agent_core.rl.launch import TrainingFailed
    from uni_agent_core.rundir.layout import METRICS, default_run_dir

    recipe = load_recipe_here(args.recipe, list(args.set))
    on_verl = recipe.trainer.backend.type == "verl"
    if args.stop_after_steps is not None and on_verl:
        raise UserError(
            "--stop-after-steps is for the embedded trainer; verl recipes run "
            "trainer.total_steps (set it with --set)"
        )
    run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(recipe)
    try:
        if on_verl:
            from uni_agent_core.rl.launch import launch

            print(
                "verl recipe: verl's trainer alone (difficulty and evaluations run on served "
                "policies: prefect deployment run agent-rl/train)"
            )
            summary = launch(recipe, run_dir)
            first, last = summary.start_step + 1, summary.start_step + summary.steps
            where = "verl logged its steps"
        else:
            from uni_agent_core.pipeline.run import run_pipeline
            from uni_agent_core.pipeline.stages import DirectStages
            from uni_agent_core.pipeline.summary import summary_lines

            result = run_pipeline(
                recipe, run_dir, DirectStages(), stop_after_steps=args.stop_after_steps
            )
            for line in summary_lines(result):
                print(line)
            trained = result.trained
            first, last = trained.start_step + 1, trained.last_step
            where = f"metrics in {run_dir / METRICS}"
    except TrainingFailed as error:  # verl's trainer printed its own error above
        print(f"error: {error}", file=sys.stderr)
        return RUN_FAILED
    print(f"trained steps {first}..{last} ({recipe.trainer.backend.type}); {where}")
    return 0


def _cmd_verl_launch(args: argparse.Namespace) -> int:
    from uni_agent_core.config import load_recipe

    recipe = load_recipe(args.recipe, list(args.set))
    return _launch_on_verl(recipe, args.run_dir, dry_run=args.dry_run)


def _launch_on_verl(recipe: Any, run_dir: str | None, *, dry_run: bool) -> int:
    from pathlib import Path

    from uni_agent_core.rl.verl.launch import launch_recipe
    from uni_agent_core.rundir.layout import default_run_dir

    directory = Path(run_dir) if run_dir else default_run_dir(recipe)
    return launch_recipe(recipe, run_dir=directory, dry_run=dry_run)


def _add_data_parser(sub: argparse._SubParsersAction) -> None:
    data = sub.add_parser("data", help="task sets: generate micro-swe, validate, oracle scores")
    data_sub = data.add_subparsers(dest="data_command", required=True)
    generate = data_sub.add_parser("generate", help="generate a bundled task suite")
    generate_sub = generate.add_subparsers(dest="suite", required=True)
    micro = generate_sub.add_parser(
        "micro-swe", help="small Python repos with planted bugs and hidden tests (SWE-bench form)"
    )
    micro.add_argument("--n", type=int, default=64, help="number of tasks")
    micro.add_argument("--seed", type=int, default=0)
    micro.add_argument("--out", default="data/micro-swe", help="output directory")
    micro.add_argument("--levels", default="L0,L1,L2,L3", help="comma-separated, taken in turn")
    micro.add_argument(
        "--split",
        choices=["train", "heldout"],
        default="train",
        help="heldout draws only bugs that never occur in train",
    )
    micro.add_argument(
        "--key-file",
        default=None,
        help="the dataset's secret key (default: the one in --out, else this host's); copy a "
        "dataset's dataset.key to regenerate it on another host",
    )
    micro.set_defaults(func=_cmd_data_generate)
    for name, helptext, func in (
        (
            "validate",
            "check every task (gold fixes, tests fail before, not flaky, no leak); "
            "writes validation.json and validation.md",
            _cmd_data_validate,
        ),
        ("oracle", "score every task's gold patch with the verifier", _cmd_data_oracle),
    ):
        command = data_sub.add_parser(name, help=helptext)
        command.add_argument("path", help="tasks.jsonl / parquet / a dataset directory")
        command.add_argument("--split", default="test", help="split of a dataset directory")
        command.add_argument("--concurrency", type=int, default=None, help="tasks at once")
        command.add_argument("--recipe", help="take the sandbox section from this recipe")
        command.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
        command.add_argument(
            "--isolation",
            choices=["bubblewrap", "none"],
            default="bubblewrap",
            help="local sandbox isolation (without --recipe)",
        )
        command.set_defaults(func=func)
        if name == "validate":
            command.add_argument("--out", help="report directory (default: beside the tasks)")
            command.add_argument("--reruns", type=int, default=3, help="runs after the fix")
            command.add_argument("--timeout-s", type=float, default=300.0, help="per test run")


def _policy_name(value: str) -> str:
    """argparse type of a policy argument: a name `resolve_policy` knows (a usage error if not)."""
    try:
        resolve_policy(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def build_parser() -> argparse.ArgumentParser:
    """The full `agent-rl` argument parser."""
    parser = argparse.ArgumentParser(prog="agent-rl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    recipe = sub.add_parser("recipe", help="work with YAML recipes")
    recipe_sub = recipe.add_subparsers(dest="recipe_command", required=True)
    validate = recipe_sub.add_parser(
        "validate", help="validate recipe files; exits non-zero and names every bad key"
    )
    validate.add_argument("paths", nargs="+", help="recipe YAML files")
    validate.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a dotted key before validating (repeatable), e.g. trainer.lr=3e-6",
    )
    validate.set_defaults(func=_cmd_recipe_validate)

    models = sub.add_parser("models", help="policy models (offline)")
    models_sub = models.add_subparsers(dest="models_command", required=True)
    prepare = models_sub.add_parser(
        "prepare", help="build or convert a policy into the local cache (no network)"
    )
    prepare.add_argument(
        "names", nargs="+", type=_policy_name, help="tiny | smollm2-135m | hf:<dir>"
    )
    prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    prepare.set_defaults(func=_cmd_models_prepare)
    listing = models_sub.add_parser("list", help="known policies and their cache state")
    listing.set_defaults(func=_cmd_models_list)

    plugins = sub.add_parser("plugins", help="plug-ins a recipe can name, and where they come from")
    plugins_sub = plugins.add_subparsers(dest="plugins_command", required=True)
    plugin_list = plugins_sub.add_parser(
        "list", help="built-in, registered and installed (entry point) plug-ins, by kind"
    )
    plugin_list.add_argument(
        "--kind", choices=sorted(ENTRY_POINT_GROUPS), help="only this kind of plug-in"
    )
    plugin_list.set_defaults(func=_cmd_plugins_list)

    init = sub.add_parser("init", help="scaffold an installable plug-in package")
    init_sub = init.add_subparsers(dest="init_command", required=True)
    init_env = init_sub.add_parser(
        "env", help="a task environment package: environment, train/test tasks, tests, recipe"
    )
    init_env.add_argument("name", help="its package and plug-in name (lowercase, `_`)")
    init_env.add_argument("--dir", default=".", help="where to write it (default: here)")
    init_env.set_defaults(func=_cmd_init_env)

    agents = sub.add_parser("agents", help="the agent CLIs trained black-box (Claude Code, Codex)")
    agents.add_argument(
        "agents_command",
        choices=["install", "list"],
        help="install: the pinned releases with npm; list: pinned and installed versions",
    )
    agents.add_argument("names", nargs="*", help="claude_code, codex (default: both)")
    agents.add_argument(
        "--prefix", help="npm prefix (default: $AGENT_RL_AGENT_CLIS or the project's .agent-clis)"
    )
    agents.set_defaults(func=_cmd_agents)

    serving = sub.add_parser(
        "serve", help="the recipe's inference servers (vLLM, SGLang, vLLM-Ascend) on a checkpoint"
    )
    serving.add_argument("--recipe", required=True, help="recipe YAML (its serve: section)")
    serving.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    serving.add_argument(
        "--checkpoint",
        default="none",
        help="none (the base policy) | latest | a step-* or verl global_step_* directory",
    )
    serving.add_argument("--run-dir", help="the run directory (default runs/<recipe name>)")
    serving.set_defaults(func=_cmd_serve)

    gateway = sub.add_parser("gateway", help="the OpenAI/Anthropic-compatible gateway")
    gateway_sub = gateway.add_subparsers(dest="gateway_command", required=True)
    serve = gateway_sub.add_parser("serve", help="serve the gateway over HTTP (loopback default)")
    serve.add_argument("--recipe", help="take policy, engine and gateway sections from a recipe")
    serve.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    serve.add_argument("--model", type=_policy_name, help="policy: tiny | smollm2-135m | hf:<dir>")
    serve.add_argument("--engine", choices=["hf", "openai_server"], default=None)
    serve.add_argument("--engine-url", action="append", default=[], help="vLLM/SGLang server")
    serve.add_argument("--server-api", choices=["vllm", "sglang"], default="vllm")
    serve.add_argument("--served-model", help="model name the server serves")
    serve.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=None, help="port (0 or unset: a free one)")
    serve.add_argument("--max-total-tokens", type=int, default=None, help="chain capacity")
    serve.add_argument("--session-ttl-s", type=float, default=None, help="idle session expiry")
    serve.set_defaults(func=_cmd_gateway_serve)
    demo = gateway_sub.add_parser(
        "demo", help="a short tool conversation through a live gateway, with its token record"
    )
    demo.add_argument("--model", type=_policy_name, default="smollm2-135m")
    demo.add_argument("--turns", type=int, default=3)
    demo.set_defaults(func=_cmd_gateway_demo)

    _add_data_parser(sub)
    _add_curriculum_parser(sub)

    compare = sub.add_parser("compare", help="MLflow runs side by side: params, metrics, curves")
    compare.add_argument("run_ids", nargs="+", help="two or more MLflow run ids")
    compare.add_argument("--tracking-uri", default="sqlite:///mlruns.db")
    compare.add_argument("--plot", default="compare.png", help="PNG of the curves")
    compare.set_defaults(func=_cmd_compare)

    view = sub.add_parser(
        "view", help="a run's sampled trajectories token by token, as HTML (served or a file)"
    )
    view.add_argument("target", help="a run directory, or an MLflow run id")
    view.add_argument("--step", type=int, default=None, help="the step (default: the newest)")
    view.add_argument("--out", help="write that step's page to this HTML file instead of serving")
    view.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: a free one)")
    view.add_argument("--tracking-uri", default="sqlite:///mlruns.db", help="for a run id")
    view.add_argument(
        "--mlflow-ui", help="MLflow UI address (e.g. http://127.0.0.1:5000): trace links"
    )
    view.add_argument(
        "--experiment-id", help="MLflow experiment of the traces (a run id gives its own)"
    )
    view.set_defaults(func=_cmd_view)

    stack = sub.add_parser("stack", help="a local Prefect server, cpu pool, deployments, worker")
    stack.add_argument(
        "stack_command",
        choices=["up", "down", "status", "env"],
        help="env prints `export PREFECT_API_URL=... PREFECT_HOME=...` for the running stack",
    )
    stack.add_argument("--project", default=".", help="project root (holds prefect.yaml)")
    stack.add_argument("--port", type=int, default=4200, help="server port on 127.0.0.1")
    stack.set_defaults(func=_cmd_stack)

    runs = sub.add_parser("runs", help="where a recipe's newest MLflow run is, and its metrics")
    runs.add_argument("runs_command", choices=["latest"])
    runs.add_argument(
        "--recipe", required=True, help="recipe YAML (its tracking URI, experiment and name)"
    )
    runs.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    runs.set_defaults(func=_cmd_runs)

    evaluate = sub.add_parser("eval", help="evaluate a checkpoint on a suite (avg@k, pass@k)")
    evaluate.add_argument("--recipe", required=True, help="recipe YAML")
    evaluate.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    evaluate.add_argument(
        "--suite",
        default="micro-swe:test",
        help="micro-swe:test | micro-swe:train | swe-bench-verified | swe-rebench | a task file",
    )
    evaluate.add_argument(
        "--checkpoint", default="latest", help="latest | none (base policy) | a step-* directory"
    )
    evaluate.add_argument("--k", type=int, default=None, help="samples per task (eval.k)")
    evaluate.add_argument("--oracle", action="store_true", help="score the gold patches")
    evaluate.add_argument("--max-tasks", type=int, default=None)
    evaluate.add_argument("--data", help="rows of a dataset suite (file or cached dataset id)")
    evaluate.add_argument(
        "--concurrency", type=int, default=None, help="samples at once (default: eval.concurrency)"
    )
    evaluate.add_argument("--run-dir", help="the run directory (default runs/<recipe name>)")
    evaluate.add_argument("--out", help="evaluation directory (reruns resume in it)")
    evaluate.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    evaluate.set_defaults(func=_cmd_eval)

    train = sub.add_parser(
        "train",
        help="the whole pipeline of a recipe, no Prefect: data validation, warm start, "
        "difficulty, evaluations before and after, MLflow (verl recipes: their trainer only)",
    )
    train.add_argument("--recipe", required=True, help="recipe YAML")
    train.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    train.add_argument(
        "--run-dir", help="every stage's reports, checkpoints, metrics (default runs/<name>)"
    )
    train.add_argument(
        "--stop-after-steps",
        type=int,
        default=None,
        help="stop early, before the checkpoint evaluations (a later run resumes)",
    )
    train.set_defaults(func=_cmd_train)

    verl = sub.add_parser("verl", help="run recipes on verl (GPU / Ascend NPU pools over Ray)")
    verl_sub = verl.add_subparsers(dest="verl_command", required=True)
    verl_launch = verl_sub.add_parser(
        "launch",
        help="compile a recipe to verl's trainer config and run it (or print it: --dry-run)",
    )
    verl_launch.add_argument("--recipe", required=True, help="recipe YAML (trainer.backend: verl)")
    verl_launch.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    verl_launch.add_argument("--run-dir", help="run directory (default runs/<recipe name>)")
    verl_launch.add_argument(
        "--dry-run",
        action="store_true",
        help="print the command and the composed verl config; write and run nothing",
    )
    verl_launch.set_defaults(func=_cmd_verl_launch)

    chat = sub.add_parser("chat", help="one chat turn with a policy through the HF engine")
    chat.add_argument("prompt")
    chat.add_argument("--model", type=_policy_name, default="smollm2-135m")
    chat.add_argument("--max-new-tokens", type=int, default=64)
    chat.add_argument("--temperature", type=float, default=0.0)
    chat.set_defaults(func=_cmd_chat)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agent-rl` console script.

    Every other exception propagates with its traceback (the interpreter exits 1): it is a bug,
    or a failure whose cause the traceback shows, and must not read like a user's mistake.

    Returns:
        The command's exit status; `USAGE_ERROR` after a `UserError`, printed as one
        `error: ...` line per line of its message (a `RecipeError`: one per problem) on stderr;
        `INTERRUPTED` after Ctrl-C. argparse exits `USAGE_ERROR` itself on a bad flag.
    """
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return INTERRUPTED
    except UserError as error:
        for line in str(error).splitlines() or [type(error).__name__]:
            print(f"error: {line}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
