"""sparkguard render INVENTORY --out DIR [--format files|ansible]: every file each host would receive,
or the same desired states as an Ansible playbook (sparkguard.export.ansible)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...engine.render import render_inventory
from ...export.ansible.export import export_inventory, offline_choices
from ...inventory.loader import load_inventory
from . import Subcommands

FORMATS = ("files", "ansible")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("render", help="write the files each host would receive, for review (no SSH)")
    parser.add_argument("inventory")
    parser.add_argument("--out", required=True, type=Path, help="output directory: OUT/<host>/<absolute path>")
    parser.add_argument("--format", choices=FORMATS, default="files",
                        help="files (default): OUT/<host>/<path> and OUT/<host>.state.yml; ansible: OUT/site.yml, "
                             "OUT/host_vars/<host>.yml, OUT/inventory.yml, OUT/ansible.cfg (docs/ansible-export.md)")
    parser.set_defaults(func=run, refusal_ending="nothing was written.")


def run(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    if args.format == "ansible":
        written = export_inventory(inventory, args.out)
        for entry in inventory.hosts:
            for choice in offline_choices(entry):
                print(f"note: {entry.name}: chosen without seeing the node, as render does: {choice}", file=sys.stderr)
        print(f"exported {len(written)} file(s) under {args.out}: cd {args.out} && ansible-playbook site.yml")
        return 0
    written = render_inventory(inventory, args.out)
    print(f"rendered {len(written)} file(s) under {args.out}")
    return 0
