"""Benchmark: the incident replay matrix on a bookworm sandbox node (earlyoom 1.7).

For every launch path (tests/replay.py LAUNCHES) with every bystander at once
(vLLM stand-in at serving's oom_score_adj with the larger RSS, a python3
notebook, an open SSH session), N runs each; prints per cell: the trainer's
oom_score_adj as earlyoom saw it, who got the first signal, median and max
reaction time (MemAvailable crossing the SIGTERM line -> SIGTERM at the
trainer), how far MemAvailable fell below the line, and whether every
bystander survived.

Variants:
  sparkguard  role earlyoom as shipped (GPU ranking agent on); lines set relative to free memory
  no-agent    the same with gpu_ranking: false: names and marks only (why the agent exists)
  stock       Debian's stock args (no --prefer/--avoid) with the same lab line, agent off

    bench/earlyoom-replay [--runs 3] [--variants sparkguard no-agent] [--launches llama-server ...]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodes import booted_nodes  # noqa: E402
from sparkguard import sandbox  # noqa: E402
from sparkguard.converge import site_deploy  # noqa: E402
from sparkguard.inventory import load_inventory  # noqa: E402
from sparkguard.runner import run_deploy  # noqa: E402
from tests.replay import LAUNCHES, ReplayPlan, remove_tools, run_cell  # noqa: E402
from tests.sandbox.conftest import SandboxHandle  # noqa: E402

STOCK = 'EARLYOOM_ARGS="-m {term} -r 1 -N /usr/local/lib/sparkguard/earlyoom-notify"\n'


def first_victim(result) -> str:
    if result.trainer_killed_first:
        return "trainer"
    for line in result.earlyoom_log.splitlines():
        if " to process " in line and "sending SIG" in line:
            return line.split('"')[1] if '"' in line else line.strip()
    return "none"


def one_run(handle: SandboxHandle, variant: str, launch: str):
    plan = ReplayPlan.from_host()
    text = (handle.inventory_dir / "hosts.yml").read_text().replace(
        "  vars:\n", f"  vars:\n    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                     f"report_interval_s: 1, gpu_ranking_interval_s: 0.5, "
                     f"gpu_ranking: {str(variant == 'sparkguard').lower()}}}\n", 1)
    inv = handle.inventory_dir.parent / "bench-inv"
    inv.mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(text)
    assert run_deploy(load_inventory(inv), site_deploy).ok
    if variant == "stock":
        handle.ssh("node-1", f"printf '{STOCK.format(term=plan.term_percent)}' > /etc/default/earlyoom && "
                             "systemctl restart earlyoom")
    result = run_cell(handle, "node-1", plan, LAUNCHES[launch], timeout_s=60)
    handle.ssh("node-1", "systemctl restart earlyoom")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["sparkguard", "no-agent"],
                        choices=["sparkguard", "no-agent", "stock"])
    parser.add_argument("--launches", nargs="+", default=list(LAUNCHES), choices=list(LAUNCHES))
    args = parser.parse_args()
    # SIGTERM (Ctrl-C's cousin from a CI timeout) must still run the cleanups: the host's
    # nr_overcommit_hugepages is restored and the node torn down only by unwinding.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ["SPARKGUARD_LAB_THRESHOLDS"] = "1"
    with booted_nodes(1, "127.0.89") as (state, inventory):
        handle = SandboxHandle(state, inventory, sandbox.Sandbox.load(state).nodes)
        print(f"{'variant':10} {'launch path':30} {'adj':>5} {'first victim(s)':22} {'reaction median/max':>20} "
              f"{'below line':>11} {'bystanders':>10}")
        print("(reaction 0 ms = the signal came before the trainer's next 50 ms sample below the line)")
        try:
            for variant in args.variants:
                for launch in args.launches:
                    runs = [one_run(handle, variant, launch) for _ in range(args.runs)]
                    reactions = [r.reaction_s * 1000 for r in runs if r.reaction_s is not None and r.got_sigterm]
                    below = [r.lowest_below_line_kib / 1024 for r in runs if r.lowest_below_line_kib is not None]
                    victims = ", ".join(sorted({first_victim(r) for r in runs}))
                    adjs = ",".join(sorted({r.hog_adj or "?" for r in runs}))
                    timing = (f"{statistics.median(reactions):.0f} / {max(reactions):.0f} ms" if reactions
                              else "never signalled")
                    depth = f"{statistics.median(below):.0f} MiB" if below else "-"
                    spared = sum(1 for r in runs if r.bystanders_alive)
                    print(f"{variant:10} {launch:30} {adjs:>5} {victims:22} {timing:>20} {depth:>11} "
                          f"{spared}/{len(runs):>8}", flush=True)
        finally:
            remove_tools(handle, "node-1")


if __name__ == "__main__":
    main()
