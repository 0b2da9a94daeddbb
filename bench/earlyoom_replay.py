"""Benchmark: the incident replay N times on a bookworm sandbox node (earlyoom 1.7).

Prints, per variant, median and max reaction time (MemAvailable crossing the
SIGTERM line -> SIGTERM at the hog) and how far MemAvailable fell below the
line before the kill, plus which process earlyoom chose.

Variants:
  sparkguard  role earlyoom as shipped (lines set relative to free memory), trainer via sparkguard-oom-first
  unmarked    role earlyoom as shipped, trainer started plainly (no oom_score_adj)
  no-python   role earlyoom with prefer_plain_python: false, trainer started plainly
  stock       Debian's stock args (no --prefer/--avoid, -s default) with the same lab line, trainer unmarked

    bench/earlyoom-replay [--runs 5] [--variants sparkguard unmarked stock]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nodes import booted_nodes  # noqa: E402
from sparkguard import sandbox  # noqa: E402
from sparkguard.converge import site_deploy  # noqa: E402
from sparkguard.inventory import load_inventory  # noqa: E402
from sparkguard.runner import run_deploy  # noqa: E402
from tests.replay import ReplayPlan, run_replay  # noqa: E402
from tests.sandbox.conftest import SandboxHandle  # noqa: E402

STOCK = 'EARLYOOM_ARGS="-m {term} -r 1 -N /usr/local/lib/sparkguard/earlyoom-notify"\n'


def victim(result) -> str:
    for line in result.earlyoom_log.splitlines():
        if " to process " in line and ("sending SIG" in line or "would send" in line.lower()):
            return line.split('"')[1] if '"' in line else line.strip()
    return "none"


def one_run(handle: SandboxHandle, variant: str) -> tuple:
    plan = ReplayPlan.from_host()
    text = (handle.inventory_dir / "hosts.yml").read_text().replace(
        "  vars:\n", f"  vars:\n    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
                     f"report_interval_s: 1, prefer_plain_python: {str(variant != 'no-python').lower()}}}\n", 1)
    inv = handle.inventory_dir.parent / "bench-inv"
    inv.mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(text)
    assert run_deploy(load_inventory(inv), site_deploy).ok
    if variant == "stock":
        handle.ssh("node-1", f"printf '{STOCK.format(term=plan.term_percent)}' > /etc/default/earlyoom && "
                             "systemctl restart earlyoom")
    result = run_replay(handle, "node-1", plan, timeout_s=60, oom_first=(variant == "sparkguard"))
    handle.ssh("node-1", "systemctl restart earlyoom")
    return result.reaction_s, result.lowest_below_line_kib, victim(result), result.bystander_alive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variants", nargs="+", default=["sparkguard", "unmarked", "no-python", "stock"])
    args = parser.parse_args()
    os.environ["SPARKGUARD_LAB_THRESHOLDS"] = "1"
    with booted_nodes(1, "127.0.89") as (state, inventory):
        handle = SandboxHandle(state, inventory, sandbox.Sandbox.load(state).nodes)
        for variant in args.variants:
            runs = [one_run(handle, variant) for _ in range(args.runs)]
            reactions = [r[0] * 1000 for r in runs if r[0] is not None]
            below = [r[1] / 1024 for r in runs if r[1] is not None]
            victims = sorted({r[2] for r in runs})
            spared = sum(1 for r in runs if r[3])
            timing = (f"reaction median {statistics.median(reactions):.0f} ms, max {max(reactions):.0f} ms"
                      if reactions else "trainer never signalled")
            print(f"{variant:10} runs={args.runs}  {timing}; MemAvailable below the line before the kill: "
                  f"median {statistics.median(below):.0f} MiB, max {max(below):.0f} MiB; "
                  f"victim(s): {', '.join(victims)}; bystander survived {spared}/{args.runs}")


if __name__ == "__main__":
    main()
