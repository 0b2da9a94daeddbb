"""sparkguard validate INVENTORY: the schema check apply and render run first."""

from __future__ import annotations

import argparse
import sys

from ...inventory.loader import load_inventory
from ..advice import fleet_advice
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("validate", help="check an inventory against the schema (no SSH)")
    parser.add_argument("inventory", help="inventory directory, its hosts.yml or its inventory.py")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    print(f"{inventory.path}: {len(inventory.hosts)} host(s) valid: {', '.join(h.name for h in inventory.hosts)}")
    for paragraph in fleet_advice(inventory):
        print(f"advice: {paragraph}", file=sys.stderr)
    for note in inventory.notes():
        print(f"note: {note}", file=sys.stderr)
    offline = [h.name for h in inventory.hosts if h.config.node.memory_total_gib is None]
    if offline:
        # Valid for apply, which reads MemTotal from the node; render and plan work offline and refuse.
        print(f"note: node.memory_total_gib is not declared for {', '.join(offline)}: apply reads it from the node, "
              f"but render and plan (offline) need it; declare it (DGX Spark: 121.7) to review this inventory "
              f"without the nodes", file=sys.stderr)
    return 0
