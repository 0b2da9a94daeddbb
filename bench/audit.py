"""Benchmark: `sparkguard audit` wall time on 1, 4 and 8 sandbox nodes.

For each size: boots its own nodes on 127.0.89.x, audits the fresh nodes,
applies the site, audits again (median of several runs), tears the nodes down.
Prints wall seconds and SSH round trips per host (commands run + files uploaded,
counted at pyinfra's SSH connector; the connection itself comes on top).

    bench/audit [--nodes 1 4 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from nodes import booted_nodes
from roundtrips import ROUND_TRIPS

from sparkguard.audit.run import run_audit
from sparkguard.builtin_roles import register
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy

register()


def timed_audit(inventory_dir: Path) -> tuple[float, int, int, bool]:
    ROUND_TRIPS.clear()
    start = time.perf_counter()
    result = run_audit(load_inventory(inventory_dir))
    elapsed = time.perf_counter() - start
    trips = max(ROUND_TRIPS.values()) if ROUND_TRIPS else 0
    checks = max(len(h.checks) for h in result.hosts)
    return elapsed, trips, checks, result.ok


def bench(nodes: int, runs: int) -> None:
    with booted_nodes(nodes, "127.0.89") as (state, inventory):
        fresh, fresh_trips, _, fresh_ok = timed_audit(inventory)
        applied = run_deploy(load_inventory(inventory), site_deploy)
        if not applied.ok:
            raise SystemExit(f"apply failed: {applied.as_dict()}")
        times, trips, checks, ok = [], 0, 0, False
        for _ in range(runs):
            elapsed, trips, checks, ok = timed_audit(inventory)
            times.append(elapsed)
        print(f"nodes={nodes}  audit of fresh nodes: {fresh:.2f} s ({'green' if fresh_ok else 'red'}, "
              f"{fresh_trips} SSH round trip/host)   after apply: median {statistics.median(times):.2f} s, "
              f"max {max(times):.2f} s over {runs} runs ({'green' if ok else 'red'}, {checks} checks/host, "
              f"{trips} SSH round trip/host)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for count in args.nodes:
        bench(count, args.runs)


if __name__ == "__main__":
    main()
