"""Benchmark: the seed's incident, replayed end to end on a real kernel, with and without sparkguard.

Boots VM nodes from one cached image (tests/vm/harness.py, variant "incident":
Debian bookworm, its own kernel, cgroup v2, a swap disk, the real docker.io
engine, Prometheus, node_exporter and Alertmanager) and runs the incident on
each (tests/vm/incident.py has the mechanics and the stand-ins):

  control    Debian as installed: no sparkguard; the monitoring packages as shipped
  treatment  the site applied (earlyoom + GPU ranking agent, swap policy, monitoring
             with its alerts and a webhook receiver on the node's loopback, recovery)

For each it prints when MemAvailable crossed the line, swap used, the SSH
probe's latency and longest silence, what died and who killed it, every alert
delivered, whether the node came back by itself and the time to unresponsive
(the control is bounded by --control-limit-s, said in the output), and draws one
PNG timeline per run when matplotlib is installed
(``.venv/bin/pip install matplotlib``, a benchmark tool, not a dependency).

    bench/incident [--arms control treatment] [--shape seed|fast] [--control-limit-s 900] [--out DIR] [--json FILE]

Root, after ./dev.sh install. The VMs run under TCG; the first run builds the
image (a few minutes). Nothing leaves loopback or the VMs; every VM is stopped.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sparkguard import roles  # noqa: E402
from tests.vm import (
    applying,  # noqa: E402
    incident,  # noqa: E402
)
from tests.vm import harness as vm_harness  # noqa: E402

roles.register()
KEEP = {"base", "earlyoom", "swap", "monitoring", "recovery"}


def treatment_done(vm) -> bool:
    """The trainer's container has exited and the kill's alert reached the receiver."""
    _, out, _ = vm.ssh(f"docker inspect -f '{{{{.State.Running}}}}' {incident.TRAINER}; "
                       f"grep -c EarlyoomKilledProcess {incident.HOOK_LOG} 2>/dev/null || true", timeout=60,
                       connect_patience=30)
    lines = out.split()
    return lines[:1] == ["false"] and len(lines) > 1 and lines[1].isdigit() and int(lines[1]) > 0


def run_arm(image, arm: str, limit_s: float, workdir: Path, shape: str) -> incident.IncidentRun:
    node = vm_harness.VM(image, workdir / arm, name=f"sg-{arm}", swap_mib=512)
    try:
        node.start()
        node.wait_for_ssh(timeout=400)
        node.write_inventory()
        incident.install(node)
        node.check("sysctl -q vm.nr_overcommit_hugepages=1024")    # the stand-in's knob, in the VM's own kernel
        serving_adj = None
        term_line = incident.term_line_kib(node)     # the shipped line: where the guard would act, on both arms
        if arm == "treatment":
            from sparkguard.roles.vllm.settings import VllmSettings

            serving_adj = VllmSettings().oom_score_adj
            applying.apply(applying.vm_inventory(node, workdir / f"{arm}-inv", incident.treatment_vars(), KEEP))
        incident.start_bystanders(node, serving_adj)
        creep = incident.seed_creep(node) if shape == "seed" else ""
        return incident.run_incident(node, arm, limit_s, term_line, treatment_done if arm == "treatment" else None,
                                     creep=creep)
    finally:
        node.stop()
        node.remove_disks()


def draw(run: incident.IncidentRun, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    figure, (memory, ssh) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, height_ratios=[3, 1])
    t = [s[0] - run.started for s in run.samples]
    memory.plot(t, [s[1] / 1024 for s in run.samples], label="MemAvailable (MiB)")
    memory.plot(t, [(s[2] - s[3]) / 1024 for s in run.samples], label="swap used (MiB)")
    if run.term_line_kib:
        memory.axhline(run.term_line_kib / 1024, color="red", linestyle=":", label="earlyoom SIGTERM line")
    for moment, name, _severity, status in run.alerts():
        if status == "firing" and name != "Watchdog":
            memory.axvline(moment - run.started, color="orange", linewidth=0.8)
    for line in run.kills:
        stamp = line.split()[0]
        try:
            memory.axvline(float(stamp) - run.started, color="black", linestyle="--", linewidth=0.8)
        except ValueError:
            continue
    memory.set_ylabel("MiB")
    memory.legend(loc="upper right", fontsize=8)
    memory.set_title(f"incident replay, {run.arm}: orange = alert delivered, dashed = kill")
    ssh.plot([p[0] - run.started for p in run.probe], [p[1] if p[1] is not None else 10 for p in run.probe], ".",
             markersize=3)
    ssh.set_ylabel("SSH probe (s; 10 = no answer)")
    ssh.set_xlabel("seconds since the trainer started")
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def table(summaries: list[dict]) -> str:
    rows = ["| arm | line crossed | max swap used | SSH: max latency / longest silence | unresponsive after | "
            "came back | killed | first critical alert | alerts delivered |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        signals = [k.split(" ", 2)[2] for k in s["kills"] if "to process" in k]
        killed = "; ".join(line[:90] for line in signals[:1]) or (
            "kernel: " + s["kernel_kills"][0].split(" ", 2)[2][:80] if s["kernel_kills"] else "nothing")
        rows.append(
            f"| {s['arm']} | {fmt(s['line_crossed_s'])} | {s['max_swap_used_mib']:.0f} MiB | "
            f"{s['probe_latency_max_s']:.1f} s / {s['longest_unanswered_s']:.0f} s | {fmt(s['unresponsive_s'])} | "
            f"{'-' if s['came_back'] is None else ('yes' if s['came_back'] else 'no')} | {killed} | "
            f"{fmt(s['first_critical_s'])} | {', '.join(s['alert_timeline']) or 'none'} |")
    return "\n".join(rows)


def fmt(seconds) -> str:
    return "-" if seconds is None else f"{seconds:.0f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arms", nargs="+", default=["control", "treatment"], choices=["control", "treatment"])
    parser.add_argument("--control-limit-s", type=float, default=900)
    parser.add_argument("--treatment-limit-s", type=float, default=720)
    parser.add_argument("--shape", choices=["seed", "fast"], default="seed",
                        help="seed: fast, then a creep through the critical band (the seed's slide, scaled); "
                             "fast: 32 MiB/s to the end (what the test suite runs)")
    parser.add_argument("--out", type=Path, default=Path("incident-out"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # unwind: every VM is stopped
    image = incident.ensure_image(log=print)
    args.out.mkdir(parents=True, exist_ok=True)
    summaries = []
    with tempfile.TemporaryDirectory(prefix="sg-incident-") as tmp:
        for arm in args.arms:
            limit = args.control_limit_s if arm == "control" else args.treatment_limit_s
            started = time.monotonic()
            run = run_arm(image, arm, limit, Path(tmp), args.shape)
            summary = run.summary()
            summary["wall_s"] = round(time.monotonic() - started)
            summaries.append(summary)
            png = args.out / f"incident-{arm}.png"
            summary["png"] = str(png) if draw(run, png) else None
            print(json.dumps(summary, indent=1), flush=True)
    print(f"\n(bounded: control {args.control_limit_s:.0f} s, treatment {args.treatment_limit_s:.0f} s after the "
          f"trainer started; 'unresponsive' = {incident.UNRESPONSIVE_S} s without an SSH answer)")
    print(table(summaries))
    if args.json:
        args.json.write_text(json.dumps(summaries, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
