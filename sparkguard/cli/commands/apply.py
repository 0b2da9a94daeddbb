"""sparkguard apply INVENTORY: validate, connect to all hosts, apply the site, report."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ... import safe_write
from ...engine.converge import role_deploy, site_deploy
from ...errors import ConfigError, ConnectError, Problem
from ...inventory.loader import load_inventory
from ...inventory.selection import select_hosts, write_retry_file
from ...run.rollout import roll
from ...run.runner import ApplyResult, run_deploy
from ..advice import fleet_advice
from ..console import console as make_console
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("apply", help="apply the site (or one role) to every host in the inventory")
    parser.add_argument("inventory")
    parser.add_argument("--role", help="apply only this role (default: every enabled role)")
    parser.add_argument("--limit", action="append", metavar="PATTERN",
                        help="hosts or groups; comma lists, globs (spark-0*), !exclude, @FILE (a retry file); repeatable")
    parser.add_argument("--retry-file", metavar="FILE",
                        help="write the hosts that failed to FILE (removed when none did); retry with --limit @FILE")
    parser.add_argument("--dry", action="store_true", help="show what would change; change nothing")
    parser.add_argument("--diff", action="store_true",
                        help="with --dry: a unified diff of every managed file against the node (secrets not shown)")
    parser.add_argument("--serial", type=int, metavar="N",
                        help="apply N hosts at a time, in inventory order; stop after a batch that failed")
    parser.add_argument("--max-fail-percent", type=int, default=0, metavar="P",
                        help="with --serial: go on while at most P%% of a batch failed (default 0: any failure stops)")
    parser.add_argument("--skip-unreachable", action="store_true",
                        help="apply to the hosts that answer; the others are FAILED (default: any unreachable host "
                             "stops the run before anything is applied)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="a line per host and changed or failed operation, as it happens (default: on a "
                             "terminal, off with --json)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show pyinfra's own log")
    parser.set_defaults(func=run, refusal_ending="nothing was touched on any node.")


def _check_fleet_flags(args: argparse.Namespace) -> None:
    problems = []
    if args.diff and not args.dry:
        problems.append(Problem("", "--diff", True, "shows what --dry would change; give --dry too "
                                "(an apply prints what it changed)"))
    if args.serial is not None and args.serial < 1:
        problems.append(Problem("", "--serial", args.serial, "a batch size of at least 1"))
    if not 0 <= args.max_fail_percent <= 100:
        problems.append(Problem("", "--max-fail-percent", args.max_fail_percent, "a percentage, 0 to 100"))
    if args.max_fail_percent and args.serial is None:
        problems.append(Problem("", "--max-fail-percent", args.max_fail_percent, "applies per batch: give --serial"))
    refused = safe_write.refusal(Path(args.retry_file)) if args.retry_file else None
    if refused:  # before any connection: the file is written after the run, never through a link
        problems.append(Problem("", "--retry-file", args.retry_file, f"{refused}; {safe_write.RULE}"))
    if problems:
        raise ConfigError(problems)


def _deploy_factory(role_name: str | None) -> Callable[[], Callable[..., Any]]:
    if role_name is None:
        return site_deploy
    from ... import registry

    by_name = registry.by_name()
    if role_name not in by_name:
        raise ConfigError([Problem("", "--role", role_name, f"unknown role; choose one of {', '.join(by_name)}")])
    return lambda: role_deploy(by_name[role_name])


def print_report(result: ApplyResult, console: Console | None = None) -> None:
    console = console or make_console()
    verb = "would change" if result.dry else "changed"
    table = Table(title=f"sparkguard apply{' (dry run)' if result.dry else ''}")
    for column in ("host", "device", "arch", "MemTotal", "distro", "guard", "operations", verb, "status"):
        table.add_column(column)
    for host in result.hosts:
        node = host.node
        table.add_row(
            host.host,
            node.device_class if node else "?",
            (node.arch or "?") if node else "?",
            f"{node.memory_total_gib:.1f} GiB" if node else "?",
            f"{node.distro_id} {node.distro_version}" if node else "?",
            host.described.get("guard", "-"),
            str(host.operations),
            str(host.changed),
            "[green]ok[/green]" if host.ok else "[red]FAILED[/red]",
        )
    console.print(table)
    for host in result.hosts:
        for error in host.errors:
            console.print(f"[red]{host.host}[/red]: {error}")
    if result.dry:
        for host in result.hosts:
            for name in host.changed_names:
                console.print(f"{host.host}: would change: {name}", markup=False, highlight=False)
            for diff in host.diffs:
                console.print(f"{host.host}:\n{diff}", markup=False, highlight=False, end="")


def run(args: argparse.Namespace) -> int:
    inventory = load_inventory(args.inventory)
    for paragraph in fleet_advice(inventory):
        print(f"advice: {paragraph}", file=sys.stderr)
    for note in inventory.notes():
        print(f"note: {note}", file=sys.stderr)
    _check_fleet_flags(args)
    factory = _deploy_factory(args.role)
    show_progress = args.progress if args.progress is not None else (sys.stderr.isatty() and not args.json)
    progress = (lambda line: print(f"  {line}", file=sys.stderr, flush=True)) if show_progress else None

    def run_batch(names: list[str] | None) -> ApplyResult:
        return run_deploy(inventory, factory, dry=args.dry, limit=names if names is not None else args.limit,
                          verbose=args.verbose, diff=args.diff, skip_unreachable=args.skip_unreachable,
                          progress=progress)

    try:
        if args.serial is None:
            result = run_batch(None)
        else:
            names = [h.name for h in select_hosts(inventory, args.limit)]
            log = (lambda _: None) if args.json else (lambda line: print(f"sparkguard: {line}", file=sys.stderr))
            result = roll(names, run_batch, serial=args.serial, max_fail_percent=args.max_fail_percent,
                          dry=args.dry, log=log)
    except ConnectError as error:
        if args.retry_file:  # nothing was applied anywhere: the unreachable hosts are the ones to retry
            write_retry_file(Path(args.retry_file), list(error.hosts))
        raise
    failed = [host.host for host in result.hosts if not host.ok]
    if args.retry_file:
        write_retry_file(Path(args.retry_file), failed)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    else:
        print_report(result)
        if failed and args.retry_file:
            print(f"retry the failed hosts with: --limit @{args.retry_file}", file=sys.stderr)
    return 0 if result.ok else 1
