"""sparkguard audit INVENTORY: read-only, one SSH command per host; exit 0 when every protection holds."""

from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table

from ...audit.result import COMMANDS_PER_HOST, AuditResult
from ...audit.run import run_audit
from ...inventory.loader import load_inventory
from ..console import console as make_console
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("audit", help="compare every node with what apply would give it (read-only)")
    parser.add_argument("inventory")
    parser.add_argument("--limit", action="append", metavar="PATTERN",
                        help="hosts or groups; comma lists, globs (spark-0*), !exclude, @FILE (a retry file); repeatable")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pyinfra's own log")
    parser.set_defaults(func=run, refusal_ending="no node was contacted.")


def print_report(result: AuditResult, console: Console | None = None) -> None:
    console = console or make_console()
    for host in result.hosts:
        node = host.node
        about = f"{node.device_class}, {node.distro_id} {node.distro_version}, {node.memory_total_gib:.1f} GiB" \
            if node else "unreachable"
        table = Table(title=f"{host.host} ({about}): {'[green]OK[/green]' if host.ok else '[red]NOT OK[/red]'}",
                      title_justify="left")
        for column in ("check", "status", "expected", "actual"):
            table.add_column(column, overflow="fold")
        for check in host.checks:
            table.add_row(check.name, "[green]ok[/green]" if check.ok else "[red]FAIL[/red]", check.expected,
                          check.actual)
        console.print(table)
    failing = sum(1 for h in result.hosts for c in h.checks if not c.ok)
    console.print(f"audit: {len(result.hosts)} host(s), {failing} failing check(s), {result.seconds:.1f} s, "
                  f"{COMMANDS_PER_HOST} SSH command per host; nothing was changed.")


def run(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    result = run_audit(inventory, limit=args.limit, verbose=args.verbose)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        print_report(result)
    return 0 if result.ok else 1
