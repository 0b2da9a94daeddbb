"""sparkguard render INVENTORY --out DIR: every file each host would receive."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..inventory import load_inventory
from ..render import render_inventory
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("render", help="write the files each host would receive, for review (no SSH)")
    parser.add_argument("inventory")
    parser.add_argument("--out", required=True, type=Path, help="output directory: OUT/<host>/<absolute path>")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    written = render_inventory(load_inventory(args.inventory), args.out)
    print(f"rendered {len(written)} file(s) under {args.out}")
    return 0
