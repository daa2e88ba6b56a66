"""The `agent-rl` console script: a thin argparse front over the library.

Each sub-command parses its arguments and calls one library function; no logic lives here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def _cmd_recipe_validate(args: argparse.Namespace) -> int:
    from uni_agent_core.config.loading import validate_paths

    return validate_paths(args.paths, out=sys.stdout, err=sys.stderr, overrides=args.set)


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


def _cmd_chat(args: argparse.Namespace) -> int:
    from uni_agent_core.inference.chat import chat_once

    return chat_once(
        model=args.model,
        prompt=args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
    )


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
    prepare.add_argument("names", nargs="+", help="tiny | smollm2-135m | hf:<dir>")
    prepare.add_argument("--force", action="store_true", help="rebuild even if cached")
    prepare.set_defaults(func=_cmd_models_prepare)
    listing = models_sub.add_parser("list", help="known policies and their cache state")
    listing.set_defaults(func=_cmd_models_list)

    chat = sub.add_parser("chat", help="one chat turn with a policy through the HF engine")
    chat.add_argument("prompt")
    chat.add_argument("--model", default="smollm2-135m")
    chat.add_argument("--max-new-tokens", type=int, default=64)
    chat.add_argument("--temperature", type=float, default=0.0)
    chat.set_defaults(func=_cmd_chat)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `agent-rl` console script."""
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
