"""The ``sparkguard`` command: what plain pyinfra does not do.

Each subcommand lives in ``sparkguard/cli/commands/<name>.py`` with a ``register``
function. Operator errors print as paragraphs and exit non-zero, never as a
traceback; a traceback means a bug in sparkguard.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import NoReturn

from .. import __version__
from ..errors import EXIT_BROKEN_PIPE, EXIT_CONFIG_ERROR, EXIT_INTERRUPTED, ConfigError, SparkguardError

COMMANDS = ("validate", "render", "apply", "sandbox", "estimate", "docs", "plan", "audit", "completion", "init")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error under --json also leaves a JSON document on stdout (exit 2 either way)."""

    json_requested = False

    def error(self, message: str) -> NoReturn:
        if Parser.json_requested:
            print_json_error({"error": "usage", "exit_code": EXIT_CONFIG_ERROR, "message": [message]})
        super().error(message)


def print_json_error(document: dict[str, object]) -> None:
    print(json.dumps({"ok": False, **document}, indent=2, sort_keys=True, default=str))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; ``only``: just that command's parser (``main`` knows it from argv).

    Each command's module imports what it runs: apply, audit and sandbox bring pyinfra and paramiko along,
    validate, render and plan do not. Registering only the command asked for keeps the offline commands
    quick to start; ``--help``, completion and anything unrecognised get every command.
    """
    parser = Parser(prog="sparkguard", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"sparkguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for name in (only,) if only in COMMANDS else COMMANDS:
        importlib.import_module(f"sparkguard.cli.commands.{name}").register(sub)
    return parser


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names, when it is its first word and a known one (``sparkguard validate ...``)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def ending(args: argparse.Namespace, error: SparkguardError) -> str | None:
    """The last line of a refusal: what the refusal spared, said only by a command that would have done it.

    A command that changes nodes says nothing was touched; one that reads them says none was contacted;
    validate, plan, render, estimate and the rest never touch a node, so they do not claim to have spared one.
    """
    if not isinstance(error, ConfigError):
        return None  # a failed run or an unreachable node: its own message says what happened
    return getattr(args, "refusal_ending", None)


def main(argv: list[str] | None = None) -> int:
    from .. import builtin_roles  # the CLI is an entry point: it chooses the roles the core works with

    builtin_roles.register()
    words = sys.argv[1:] if argv is None else argv
    Parser.json_requested = "--json" in words
    args = build_parser(command_of(words)).parse_args(argv)
    as_json = bool(getattr(args, "json", False))
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a reader gone away is caught below and not at interpreter exit
        return code
    except SparkguardError as error:
        for paragraph in error.paragraphs():
            print(f"sparkguard: {paragraph}\n", file=sys.stderr)
        last = ending(args, error)
        if last:
            print(f"sparkguard: {last}", file=sys.stderr)
        if as_json:
            print_json_error({**error.as_dict(), "command": args.command})
        return error.exit_code
    except KeyboardInterrupt:
        print("sparkguard: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`sparkguard apply --json | head`): no traceback, the shell's exit for SIGPIPE.
        # What ran on the nodes ran; only the report could not be written.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
