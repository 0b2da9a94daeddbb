"""Benchmark: where a fresh apply's time goes, on one sandbox node.

Times every SSH command and upload of a fresh apply of deploy/site.py at pyinfra's connector and
sums them by kind: the snapshot probe, packages (apt-get update and install, dpkg), file uploads,
the commands that check and rename files, systemd (daemon-reload, restarts, start/enable), the role
re-reads, and the rest. Then a no-op rerun for comparison. Boots its own node on 127.0.89.x and
tears it down. --monitoring turns role monitoring on (node_exporter, Prometheus, Alertmanager: the
largest packages a role installs), to see what installing them costs beside the rest.

    bench/fresh-breakdown [--runs 3] [--monitoring]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from nodes import booted_nodes
from pyinfra.connectors.ssh import SSHConnector

from sparkguard.builtin_roles import register
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy

register()

TIMED: list[tuple[str, float]] = []  # (kind, seconds) of each round trip of the current apply


def kind_of(command: str) -> str:
    if "memtotal_kb=" in command:
        return "snapshot probe"
    if "apt-get" in command or "dpkg" in command or "update-success-stamp" in command:
        return "packages"
    if "sparkguard-commit.lock" in command or "sparkguard-stage" in command:
        return "files: stage, check, rename"
    if command.startswith("MANAGER=") or "fs() {" in command:
        return "role re-read"
    if "systemctl" in command:
        return "systemd"
    return "other"


def _timed(method: Callable[..., Any], upload: bool) -> Callable[..., Any]:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(self, *args, **kwargs)
        finally:
            kind = "files: upload" if upload else kind_of(str(args[0]))
            TIMED.append((kind, time.perf_counter() - start))
    return wrapper


SSHConnector.run_shell_command = _timed(SSHConnector.run_shell_command, upload=False)
SSHConnector.put_file = _timed(SSHConnector.put_file, upload=True)


def timed_apply(inventory: Any) -> float:
    TIMED.clear()
    start = time.perf_counter()
    result = run_deploy(load_inventory(inventory), site_deploy)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"apply failed: {result.as_dict()}")
    return elapsed


def with_monitoring(inventory: Path) -> None:
    """Role monitoring on, alerts to a receiver on the node's own loopback (nothing listens: none fires)."""
    hosts = inventory / "hosts.yml"
    document = yaml.safe_load(hosts.read_text())
    document["all"]["vars"]["monitoring"] = {"enabled": True,
                                             "alertmanager": {"webhook_url": "http://127.0.0.1:9/hook"}}
    hosts.write_text(yaml.safe_dump(document, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh nodes to measure (median)")
    parser.add_argument("--monitoring", action="store_true", help="role monitoring on (its packages installed)")
    args = parser.parse_args()
    walls, sums, counts, noops = [], defaultdict(list), defaultdict(list), []
    for run in range(args.runs):
        with booted_nodes(1, "127.0.89") as (_, inventory):
            if args.monitoring:
                with_monitoring(inventory)
            walls.append(timed_apply(inventory))
            by_kind: dict[str, float] = defaultdict(float)
            for kind, seconds in TIMED:
                by_kind[kind] += seconds
            tally = Counter(kind for kind, _ in TIMED)
            for kind in set(by_kind) | set(sums):
                sums[kind].append(by_kind.get(kind, 0.0))
                counts[kind].append(tally.get(kind, 0))
            noops.append(timed_apply(inventory))
            print(f"run {run + 1}: fresh {walls[-1]:.2f} s, {len(TIMED) and sum(tally.values())} round trips; "
                  f"no-op {noops[-1]:.2f} s", flush=True)
    print(f"\nFresh apply of the site on one sandbox node (median of {args.runs}; in-process, no CLI start-up):")
    print(f"  wall {statistics.median(walls):.2f} s; no-op rerun {statistics.median(noops):.2f} s")
    print(f"  {'kind':32} {'seconds':>8} {'round trips':>12}")
    for kind in sorted(sums, key=lambda k: -statistics.median(sums[k])):
        print(f"  {kind:32} {statistics.median(sums[kind]):8.2f} {statistics.median(counts[kind]):12.0f}")
    total = sum(statistics.median(v) for v in sums.values())
    packages = statistics.median(sums.get("packages", [0.0]))
    print(f"  packages {packages:.2f} s; everything else {total - packages:.2f} s of SSH time "
          f"(+ {statistics.median(walls) - total:.2f} s on the controller)")


if __name__ == "__main__":
    main()
