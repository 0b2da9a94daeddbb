"""Benchmark: fresh apply and no-op rerun of deploy/site.py on 1 and 4 sandbox nodes, per architecture.

Prints wall seconds (no-op rerun as the median of several runs), operations per
host and SSH round trips per host (commands run + files uploaded, counted at
pyinfra's SSH connector). Boots its own nodes on 127.0.88.x and tears them down.
``--arch amd64 arm64`` runs each on both: arm64 nodes run under qemu user emulation here, so their times are
emulation's, and only a slowdown far from the amd64 ratio is the program's own.

    bench/apply [--nodes 1 4] [--reruns 5] [--arch amd64 arm64]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from nodes import booted_nodes
from roundtrips import ROUND_TRIPS

from sparkguard.builtin_roles import register
from sparkguard.dev.emulation import ARCHES, host_arch
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy

register()


def timed_apply(inventory_dir: Path) -> tuple[float, dict]:
    ROUND_TRIPS.clear()
    start = time.perf_counter()
    result = run_deploy(load_inventory(inventory_dir), site_deploy)
    elapsed = time.perf_counter() - start
    if not result.ok:
        raise SystemExit(f"apply failed: {result.as_dict()}")
    per_host = {h.host: (h.operations, h.changed, ROUND_TRIPS[h.host]) for h in result.hosts}
    return elapsed, per_host


def bench(nodes: int, reruns: int, arch: str) -> None:
    with booted_nodes(nodes, "127.0.88", arch=arch) as (state, inventory):
        fresh, fresh_hosts = timed_apply(inventory)
        times, noop_hosts = [], {}
        for _ in range(reruns):
            elapsed, noop_hosts = timed_apply(inventory)
            times.append(elapsed)
        ops, _, fresh_rt = next(iter(fresh_hosts.values()))
        noop_ops, noop_changed, noop_rt = next(iter(noop_hosts.values()))
        print(f"{arch} nodes={nodes}  fresh apply: {fresh:.2f} s ({fresh_rt} SSH round trips/host)   "
              f"no-op rerun: median {statistics.median(times):.2f} s, max {max(times):.2f} s "
              f"over {reruns} runs ({noop_rt} SSH round trips/host, {noop_ops} operations/host, "
              f"{noop_changed} changed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--arch", nargs="+", choices=sorted(ARCHES), default=[host_arch()])
    args = parser.parse_args()
    for count in args.nodes:
        for arch in args.arch:
            bench(count, args.reruns, arch)


if __name__ == "__main__":
    main()
