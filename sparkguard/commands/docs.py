"""sparkguard docs: the settings reference, generated from the schema."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..docs import settings_reference
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("docs", help="print (or --write) the settings reference generated from the schema")
    parser.add_argument("--write", type=Path, help="write to this file instead of stdout")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    text = settings_reference()
    if args.write:
        args.write.write_text(text)
    else:
        print(text, end="")
    return 0
