"""Benchmark: the incident replay matrix, per distro and guard mechanism.

For every launch path and job shape (tests/replay.py LAUNCHES and SHAPES: process
trees with memfd workers, torchrun, a fast start, ollama beside it, no nvidia-smi)
with every bystander at once (vLLM stand-in at serving's oom_score_adj with the
larger RSS, a python3 notebook, an open SSH session), N runs each; prints per
cell: the trainer's oom_score_adj as earlyoom saw it, who got the first signal
(the job: trainer, worker or launcher), median and max reaction time
(MemAvailable crossing the SIGTERM line -> SIGTERM at the trainer), the job's
exit (first signal -> every process of the job gone) and memory release (first
signal -> the job's huge pages back on the host), how far MemAvailable fell
below the line, and whether every bystander survived.

Variants (bookworm, earlyoom 1.7):
  sparkguard  role earlyoom as shipped (GPU ranking agent on); lines set relative to free memory
  no-agent    the same with gpu_ranking: false: names and marks only (why the agent exists)
  stock       Debian's stock args (no --prefer/--avoid) with the same lab line, agent off

Guards (--guards; one node per distro, the same lines for every guard):
  earlyoom-1.7  bookworm node, role as shipped (guard auto -> earlyoom 1.7)
  nohang        trixie node, role as shipped (guard auto -> nohang 0.2.0)
  earlyoom-1.8  trixie node, earlyoom 1.8.2 accepted (newer_version: accept-anon-relative)
The lines sit at ~45 % of MemTotal for every guard (nohang refuses lines above 50 %), reached
with a bounded host ballast (tests/replay.py host_ballast). Per guard it also prints the guard's
CPU time per hour at idle with the shipped defaults (systemd's CPUUsageNSec over --idle-s).

    bench/earlyoom-replay [--runs 3] [--variants sparkguard no-agent] [--launches 'python3 + memfd workers' ...]
    bench/earlyoom-replay --guards earlyoom-1.7 nohang earlyoom-1.8 [--runs 3] [--idle-s 120]
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

from sparkguard import roles  # noqa: E402
from sparkguard.dev import sandbox  # noqa: E402
from sparkguard.engine.converge import site_deploy  # noqa: E402
from sparkguard.inventory.loader import load_inventory  # noqa: E402
from sparkguard.run.runner import run_deploy  # noqa: E402
from tests.replay import LAUNCHES, SHAPES, ReplayPlan, host_ballast, meminfo_kib, remove_tools, run_cell  # noqa: E402
from tests.sandbox.conftest import SandboxHandle  # noqa: E402

roles.register()
CELLS = {**LAUNCHES, **SHAPES}

STOCK = 'EARLYOOM_ARGS="-m {term} -r 1 -N /usr/local/lib/sparkguard/earlyoom-notify"\n'


def first_victim(result) -> str:
    if result.trainer_killed_first:
        return "job"
    for line in result.earlyoom_log.splitlines():
        if " to process " in line and "sending SIG" in line:
            return line.split('"')[1] if '"' in line else line.strip()
        if "sparkguard: nohang sent SIG" in line:
            return line.split(" to ", 1)[1].split(" (pid")[0]
    return "none"


def spread(seconds: list[float | None]) -> str:
    """Median / max in ms of the values measured ('-' when none was)."""
    values = [s * 1000 for s in seconds if s is not None]
    return f"{statistics.median(values):.0f} / {max(values):.0f} ms" if values else "-"


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
    result = run_cell(handle, "node-1", plan, CELLS[launch], timeout_s=60)
    handle.ssh("node-1", "systemctl restart earlyoom")
    return result


GUARDS = {
    # guard: (release, extra earlyoom settings, unit)
    "earlyoom-1.7": ("bookworm", "", "earlyoom"),
    "nohang": ("trixie", "", "nohang"),
    "earlyoom-1.8": ("trixie", "newer_version: accept-anon-relative, ", "earlyoom"),
}


def write_inventory(handle: SandboxHandle, name: str, earlyoom: str) -> Path:
    text = (handle.inventory_dir / "hosts.yml").read_text()
    if earlyoom:
        text = text.replace("  vars:\n", f"  vars:\n    earlyoom: {{{earlyoom}}}\n", 1)
    inv = handle.inventory_dir.parent / name
    inv.mkdir(exist_ok=True)
    (inv / "hosts.yml").write_text(text)
    return inv


def idle_cpu_s_per_hour(handle: SandboxHandle, unit: str, seconds: float) -> float:
    """The guard's CPU time per hour at idle: utime+stime (+ waited-for children) of its main process.

    /proc/PID/stat counts in clock ticks (10 ms); over the default 600 s window that resolves
    0.06 s per hour. (systemd's CPUUsageNSec is not set in these nodes: no CPU accounting.)
    """
    import time

    def usage() -> tuple[str, int]:
        pid = handle.ssh("node-1", f"systemctl show -p MainPID --value {unit}")[1].strip()
        fields = handle.ssh("node-1", f"cat /proc/{pid}/stat")[1].rsplit(")", 1)[1].split()
        ticks = int(handle.ssh("node-1", "getconf CLK_TCK")[1].strip() or 100)
        return pid, sum(int(f) for f in fields[11:15]) * 1000 // ticks   # ms

    pid, first = usage()
    time.sleep(seconds)
    pid_after, last = usage()
    return (last - first) / 1000 * 3600 / seconds if pid == pid_after else float("nan")


class PsiSampler:
    """The host's memory PSI (the nodes share its kernel) during a cell: what systemd-oomd would act on."""

    def __init__(self) -> None:
        import threading

        self.some = self.full = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            for line in Path("/proc/pressure/memory").read_text().splitlines():
                kind, _, fields = line.partition(" ")
                avg10 = float(dict(f.split("=") for f in fields.split())["avg10"])
                if kind == "some":
                    self.some = max(self.some, avg10)
                else:
                    self.full = max(self.full, avg10)

    def __enter__(self) -> PsiSampler:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stop.set()
        self.thread.join()


def guard_runs(guard: str, runs: int, launches: list[str], idle_s: float) -> None:
    release, extra, unit = GUARDS[guard]
    net = {"bookworm": "127.0.89", "trixie": "127.0.88"}[release]
    with booted_nodes(1, net, release=release) as (state, inventory):
        handle = SandboxHandle(state, inventory, sandbox.Sandbox.load(state).nodes)
        assert run_deploy(load_inventory(write_inventory(handle, "idle-inv", extra.rstrip(", "))), site_deploy).ok
        version = unit + " " + handle.ssh("node-1", f"dpkg-query -W -f '${{Version}}' {unit}")[1].strip()
        idle = idle_cpu_s_per_hour(handle, f"{unit}.service", idle_s)
        if runs == 0:
            print(f"{release:9} {guard:13} {version[:16]:16} {'(idle only)':28} {'-':14} {'-':>18} {'-':>8} "
                  f"{'-':>14} {'-':6} {idle:>9.2f} -", flush=True)
            return
        total = meminfo_kib("MemTotal")
        at = ReplayPlan(total, 0)
        target = int(0.45 * total) + at.bystander_mib * 1024 + at.term_after_bytes // 1024
        try:
            with host_ballast(target, cap_mib=14 * 1024):
                plan = ReplayPlan.from_host()
                lines = f"term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, " \
                        f"report_interval_s: 1, gpu_ranking_interval_s: 0.5"
                assert run_deploy(load_inventory(write_inventory(handle, "lab-inv", extra + lines)), site_deploy).ok
                for launch in launches:
                    with PsiSampler() as psi:
                        results = [run_cell(handle, "node-1", plan, CELLS[launch], timeout_s=60, guard=unit)
                                   for _ in range(runs)]
                    reactions = [r.reaction_s * 1000 for r in results if r.reaction_s is not None and r.got_sigterm]
                    lowest = [min(e["mem_available_kib"] for e in r.hog_events if "mem_available_kib" in e) / 1024
                              for r in results if any("mem_available_kib" in e for e in r.hog_events)]
                    victims = ", ".join(sorted({first_victim(r) for r in results}))
                    timing = (f"{statistics.median(reactions):.0f} / {max(reactions):.0f} ms" if reactions
                              else "never signalled")
                    line_mib = plan.term_line_kib / 1024
                    low = f"{min(lowest):.0f} ({min(lowest) - line_mib:+.0f})" if lowest else "-"
                    spared = sum(1 for r in results if r.bystanders_alive)
                    print(f"{release:9} {guard:13} {version.strip()[:16]:16} {launch:28} {victims:14} {timing:>18} "
                          f"{line_mib:>8.0f} {low:>14} {spared}/{len(results):<3} {idle:>9.2f} "
                          f"{psi.some:>5.2f}/{psi.full:.2f}", flush=True)
        finally:
            remove_tools(handle, "node-1")


def main_guards(args) -> None:
    print(f"{'distro':9} {'guard':13} {'version':16} {'launch path':28} {'first victim':14} "
          f"{'reaction med/max':>18} {'line MiB':>8} {'lowest MiB':>14} {'spared':6} {'idle CPU':>9} PSI some/full")
    print("(reaction: MemAvailable crossing the SIGTERM line -> SIGTERM at the trainer; lowest: MemAvailable's "
          "minimum before the signal, relative to the line in brackets; idle CPU: guard CPU seconds per hour, "
          "shipped defaults; PSI: the host's highest memory some/full avg10 during the cells, what systemd-oomd acts on)")
    for guard in args.guards:
        guard_runs(guard, args.runs, args.launches, args.idle_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=["sparkguard", "no-agent"],
                        choices=["sparkguard", "no-agent", "stock"])
    parser.add_argument("--launches", nargs="+", default=None, choices=list(CELLS))
    parser.add_argument("--guards", nargs="+", choices=list(GUARDS),
                        help="compare guard mechanisms per distro instead of the bookworm variants")
    parser.add_argument("--idle-s", type=float, default=600, help="idle window for the guard's CPU cost")
    args = parser.parse_args()
    # SIGTERM (Ctrl-C's cousin from a CI timeout) must still run the cleanups: the host's
    # nr_overcommit_hugepages is restored and the node torn down only by unwinding.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ["SPARKGUARD_LAB_THRESHOLDS"] = "1"
    if args.guards:
        args.launches = args.launches or ["sparkguard-train", "python3 in a --memory cgroup"]
        main_guards(args)
        return
    args.launches = args.launches or list(CELLS)
    with booted_nodes(1, "127.0.89") as (state, inventory):
        handle = SandboxHandle(state, inventory, sandbox.Sandbox.load(state).nodes)
        print(f"{'variant':10} {'job shape':44} {'adj':>7} {'first victim(s)':22} {'reaction median/max':>20} "
              f"{'job gone med/max':>18} {'mem back med/max':>18} {'below line':>11} {'bystanders':>10}")
        print("(reaction 0 ms = the signal came before the trainer's next 50 ms sample below the line; job gone and "
              "mem back are counted from the first signal)")
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
                    gone = spread([r.job_gone_s for r in runs])
                    back = spread([r.release_s for r in runs])
                    print(f"{variant:10} {launch:44} {adjs:>7} {victims:22} {timing:>20} {gone:>18} {back:>18} "
                          f"{depth:>11} {spared}/{len(runs):>8}", flush=True)
        finally:
            remove_tools(handle, "node-1")


if __name__ == "__main__":
    main()
