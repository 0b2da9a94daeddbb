"""sparkguard sandbox up|status|down: local systemd-nspawn nodes for trying and testing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ...dev import sandbox
from . import Subcommands


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("sandbox", help="boot/stop local Debian nodes (systemd-nspawn; needs root)")
    actions = parser.add_subparsers(dest="action", required=True)

    up = actions.add_parser("up", help="boot N nodes and write their inventory (printed as the last line)")
    up.add_argument("--nodes", type=int, default=1)
    up.add_argument("--release", choices=sandbox.RELEASES, default="bookworm")
    up.add_argument("--arch", choices=sorted(sandbox.ARCHES), default=None,
                    help="the nodes' architecture (default: this machine's); another one runs under qemu user "
                         "emulation (qemu-user-static, registered with binfmt_misc when it is not)")
    up.add_argument("--net", default=sandbox.DEFAULT_NET, help="loopback /24 prefix for node addresses")
    up.add_argument("--inventory-dir", type=Path, default=sandbox.DEFAULT_INVENTORY_DIR)
    up.add_argument("--cache-dir", type=Path, default=sandbox.DEFAULT_CACHE_DIR)
    status = actions.add_parser("status", help="show the nodes and whether SSH answers")
    status.add_argument("--json", action="store_true")
    down = actions.add_parser("down", help="stop every node and remove it; leaves nothing behind")
    for action in (up, status, down):
        action.add_argument("--state-dir", type=Path, default=sandbox.DEFAULT_STATE_DIR,
                            help="where node rootfs copies, keys and known_hosts live")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        hosts_file = sandbox.up(args.nodes, args.release, args.state_dir, args.inventory_dir, args.net,
                                args.cache_dir, arch=args.arch)
        print(hosts_file.parent)
        return 0
    if args.action == "status":
        rows = sandbox.status(args.state_dir)
        if args.json:
            print(json.dumps(rows, indent=2))
        elif not rows:
            print("sandbox: no nodes")
        else:
            for row in rows:
                print(f"{row['node']:10} {row['address']:15} {row['release']:9} {row['arch']:6} "
                      f"{'running' if row['running'] else 'stopped':8} ssh={'up' if row['ssh'] else 'down'}")
        return 0 if rows and all(r["running"] and r["ssh"] for r in rows) else 1
    sandbox.down(args.state_dir)
    return 0
