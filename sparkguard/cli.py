"""The ``sparkguard`` command: what plain pyinfra does not do.

Each subcommand lives in ``sparkguard/commands/<name>.py`` with a ``register``
function. Operator errors print as paragraphs and exit non-zero, never as a
traceback; a traceback means a bug in sparkguard.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import ConfigError, SparkguardError

COMMANDS = ("validate", "render", "apply", "sandbox", "estimate", "docs", "plan", "audit", "completion", "init")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sparkguard", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"sparkguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"sparkguard.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from . import builtin_roles  # the CLI is an entry point: it chooses the roles the core works with

    builtin_roles.register()
    args = build_parser().parse_args(argv)
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # here, so that a reader gone away is caught below and not at interpreter exit
        return code
    except SparkguardError as error:
        for paragraph in error.paragraphs():
            print(f"sparkguard: {paragraph}\n", file=sys.stderr)
        if isinstance(error, ConfigError):
            print("sparkguard: nothing was touched on any node.", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        print("sparkguard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`sparkguard apply --json | head`): no traceback, the shell's exit for SIGPIPE.
        # What ran on the nodes ran; only the report could not be written.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
