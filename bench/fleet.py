"""Benchmark: sparkguard and ansible-playbook on the same desired state and the same sandbox nodes.

For each fleet size N: boots N sandbox nodes, and measures sparkguard (apply, 5 no-op reruns, 5 audits);
then boots the same N nodes afresh and measures the exported playbook (`sparkguard render --format
ansible`: ansible-playbook with SSH pipelining, forks = N; apply, 5 no-op reruns, 5 `--check` runs).
Both tools run as the operator runs them (their CLI, a process of their own), so start-up is included.

Measured for every run:
- wall seconds (reruns: the median of 5);
- SSH round trips per host, counted on the nodes themselves, the same way for both tools: each node's sshd
  logs at LogLevel VERBOSE (a drop-in this benchmark writes) one "Starting session" per command or file
  transfer; the connection itself comes on top;
- the controller's CPU seconds (user + system of the tool and every process it waited for; an OpenSSH
  ControlMaster that Ansible leaves running in the background is not included) and its peak memory (the
  summed RSS of the tool's process tree, sampled every 20 ms).

Then a scale model: the controller's CPU per host (the slope between the sizes measured) and the round trips
per host projected to 100 and 500 hosts; see docs/benchmarks.md.

    bench/fleet [--nodes 1 4 16] [--reruns 5] [--json ROWS]
    bench/fleet --nodes 1 4 --only-sparkguard ROWS --json NEW   # after a sparkguard change: its side again
    bench/fleet --from-json ROWS [ROWS ...]                     # the table and the model of earlier runs
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import paramiko
from nodes import booted_nodes

from sparkguard.dev import sandbox

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NET = "127.0.90"
SSHD_DROP_IN = "etc/ssh/sshd_config.d/00-bench-verbose.conf"


@dataclass
class Run:
    wall: float
    cpu: float
    peak_mib: float
    trips: float          # per host
    changed: int


@dataclass
class Tool:
    name: str
    fresh: Run | None = None
    noop: list[Run] = field(default_factory=list)
    check: list[Run] = field(default_factory=list)


# ---------------------------------------------------------------- measuring one command


def _tree_rss_kib(root: int) -> int:
    """Summed VmRSS of ``root`` and its descendants (from /proc; processes may vanish meanwhile)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid, ppid = int(entry), int(fields.get("PPid", "0").strip() or 0)
        children.setdefault(ppid, []).append(pid)
        rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0]) if "VmRSS" in fields else 0
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


def measured(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float, str]:
    """(wall s, CPU s, peak MiB, stdout) of one command; exits the benchmark if it fails."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, **(env or {})})
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss_kib(process.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    output, _ = process.communicate()
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed (exit {process.returncode}):\n{output[-3000:]}")
    return wall, cpu, peak / 1024, output


# ---------------------------------------------------------------- round trips, counted on the nodes


def _ssh(state: Path, address: str, command: str) -> str:
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # noqa: S507 - our own loopback sandbox
    client.connect(address, username="root", key_filename=str(sandbox.key_path(state)), timeout=30)
    try:
        _, stdout, _ = client.exec_command(command)
        return stdout.read().decode()
    finally:
        client.close()


def verbose_sshd(state: Path) -> None:
    """sshd logs every session ("Starting session: command ...") at LogLevel VERBOSE."""
    box = sandbox.Sandbox.load(state)
    assert box is not None
    for node in box.nodes:
        drop_in = Path(node.rootfs) / SSHD_DROP_IN
        drop_in.write_text("# bench/fleet: one log line per SSH session, to count round trips\nLogLevel VERBOSE\n")
        _ssh(state, node.address, "systemctl reload ssh")


def sessions_between(state: Path, since: float, until: float) -> float:
    """Mean SSH sessions per node between two wall-clock times (from each node's own sshd log)."""
    box = sandbox.Sandbox.load(state)
    assert box is not None
    counts = []
    for node in box.nodes:
        out = _ssh(state, node.address, f"journalctl -u ssh --no-pager -o cat --since @{since:.3f} "
                                        f"--until @{until:.3f} | grep -c 'Starting session' || true")
        counts.append(int(out.strip() or 0))
    return statistics.mean(counts)


def counted(state: Path, command: list[str], changed_from: re.Pattern[str] | None = None,
            env: dict[str, str] | None = None) -> Run:
    time.sleep(1.1)  # journalctl's --since/--until have second granularity in practice: keep runs apart
    since = time.time()
    wall, cpu, peak, output = measured(command, env)
    until = time.time()
    time.sleep(0.5)
    changed = sum(int(n) for n in changed_from.findall(output)) if changed_from else 0
    return Run(wall, cpu, peak, sessions_between(state, since, until), changed)


# ---------------------------------------------------------------- the two tools

ANSIBLE_CHANGED = re.compile(r"changed=(\d+)")
SPARKGUARD_CHANGED = re.compile(r'^ {2}"changed": (\d+),$', re.MULTILINE)


def sparkguard_runs(state: Path, inventory: Path, reruns: int) -> Tool:
    tool = Tool("sparkguard")
    apply = [str(BIN / "sparkguard"), "apply", str(inventory), "--json", "--no-progress"]
    tool.fresh = counted(state, apply, SPARKGUARD_CHANGED)
    tool.noop = [counted(state, apply, SPARKGUARD_CHANGED) for _ in range(reruns)]
    tool.check = [counted(state, [str(BIN / "sparkguard"), "audit", str(inventory), "--json"]) for _ in range(reruns)]
    return tool


def ansible_runs(state: Path, inventory: Path, nodes: int, reruns: int, work: Path) -> Tool:
    tool = Tool("ansible-playbook")
    export = work / "ansible"
    subprocess.run([str(BIN / "sparkguard"), "render", str(inventory), "--format", "ansible", "--out", str(export)],
                   check=True, capture_output=True)
    env = {"ANSIBLE_CONFIG": str(export / "ansible.cfg"), "ANSIBLE_PIPELINING": "True",
           "ANSIBLE_FORKS": str(nodes), "ANSIBLE_PYTHON_INTERPRETER": "/usr/bin/python3",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCAL_TEMP": str(work / "ansible-tmp")}
    playbook = [str(BIN / "ansible-playbook"), "-i", str(export / "inventory.yml"), str(export / "site.yml"),
                "-f", str(nodes)]
    tool.fresh = counted(state, playbook, ANSIBLE_CHANGED, env)
    tool.noop = [counted(state, playbook, ANSIBLE_CHANGED, env) for _ in range(reruns)]
    tool.check = [counted(state, [*playbook, "--check"], ANSIBLE_CHANGED, env) for _ in range(reruns)]
    return tool


# ---------------------------------------------------------------- report


def median(runs: list[Run], attr: str) -> float:
    return statistics.median(getattr(r, attr) for r in runs)


def row(nodes: int, sg: Tool, an: Tool) -> dict[str, float]:
    assert sg.fresh and an.fresh
    return {
        "nodes": nodes,
        "sg_fresh": sg.fresh.wall, "an_fresh": an.fresh.wall,
        "sg_noop": median(sg.noop, "wall"), "an_noop": median(an.noop, "wall"),
        "sg_check": median(sg.check, "wall"), "an_check": median(an.check, "wall"),
        "sg_trips_fresh": sg.fresh.trips, "an_trips_fresh": an.fresh.trips,
        "sg_trips_noop": median(sg.noop, "trips"), "an_trips_noop": median(an.noop, "trips"),
        "sg_trips_check": median(sg.check, "trips"), "an_trips_check": median(an.check, "trips"),
        "sg_cpu_noop": median(sg.noop, "cpu"), "an_cpu_noop": median(an.noop, "cpu"),
        "sg_cpu_fresh": sg.fresh.cpu, "an_cpu_fresh": an.fresh.cpu,
        "sg_peak_mib": max(r.peak_mib for r in [sg.fresh, *sg.noop]),
        "an_peak_mib": max(r.peak_mib for r in [an.fresh, *an.noop]),
        "sg_noop_changed": max(r.changed for r in sg.noop), "an_noop_changed": max(r.changed for r in an.noop),
    }


def print_table(rows: list[dict[str, float]]) -> None:
    print("\n| N | tool | fresh apply | no-op rerun (median) | audit / --check (median) | round trips/host "
          "fresh / no-op / check | controller CPU fresh / no-op | peak memory | no-op changed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for tool, key in (("sparkguard", "sg"), ("ansible-playbook", "an")):
            print(f"| {r['nodes']:.0f} | {tool} | {r[key + '_fresh']:.2f} s | {r[key + '_noop']:.2f} s | "
                  f"{r[key + '_check']:.2f} s | {r[key + '_trips_fresh']:.0f} / {r[key + '_trips_noop']:.0f} / "
                  f"{r[key + '_trips_check']:.0f} | {r[key + '_cpu_fresh']:.1f} s / {r[key + '_cpu_noop']:.2f} s | "
                  f"{r[key + '_peak_mib']:.0f} MiB | {r[key + '_noop_changed']:.0f} |")
    print("\n| N | ansible / sparkguard: fresh | no-op | check vs audit | round trips no-op | CPU no-op | "
          "sparkguard no-op / audit |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['nodes']:.0f} | {r['an_fresh'] / r['sg_fresh']:.1f}x | {r['an_noop'] / r['sg_noop']:.1f}x | "
              f"{r['an_check'] / r['sg_check']:.1f}x | {r['an_trips_noop'] / max(r['sg_trips_noop'], 1):.0f}x | "
              f"{r['an_cpu_noop'] / r['sg_cpu_noop']:.1f}x | {r['sg_noop'] / r['sg_check']:.2f} |")


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(fixed, per host) of the least-squares line through the measured points."""
    mean_x, mean_y = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum((x - mean_x) ** 2 for x in xs)
    return mean_y - slope * mean_x, slope


def print_model(rows: list[dict[str, float]], cores: int) -> None:
    """Controller CPU = fixed + per_host * N (least squares over the sizes measured), for the no-op and the
    fresh apply. Wall time at scale is bounded below by that CPU over the cores the tool can use: sparkguard
    (pyinfra) is one process driving every host from gevent greenlets, so ONE core; ansible-playbook forks a
    worker per host up to ``forks``, so every core."""
    if len(rows) < 2:
        return
    print("\nScale model (controller side; least squares over the measured sizes):")
    for key, tool, usable in (("sg", "sparkguard", 1), ("an", "ansible-playbook", cores)):
        xs = [r["nodes"] for r in rows]
        trips = rows[-1][f"{key}_trips_noop"]
        for run in ("noop", "fresh"):
            fixed, slope = _fit(xs, [r[f"{key}_cpu_{run}"] for r in rows])
            fit = ", ".join(f"N={r['nodes']:.0f}: measured {r[f'{key}_cpu_{run}']:.2f} s, model "
                            f"{fixed + slope * r['nodes']:.2f} s" for r in rows)
            print(f"  {tool} {run}: CPU = {fixed:.2f} s + {slope * 1000:.0f} ms x N ({fit})")
            for n in (100, 500):
                cpu = fixed + slope * n
                extra = f", {trips * n:.0f} SSH round trips" if run == "noop" else ""
                print(f"    N={n}: {cpu:.0f} CPU s on the controller (>= {cpu / usable:.0f} s wall on "
                      f"{usable} core{'s' if usable > 1 else ''}){extra}, {n} connections")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--reruns", type=int, default=5)
    parser.add_argument("--ansible-reruns", type=int, help="ansible-playbook's reruns, if not --reruns "
                        "(at 16 nodes on 2 cores one of its no-op runs takes minutes)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    parser.add_argument("--only-sparkguard", type=Path, metavar="ROWS_JSON",
                        help="measure sparkguard only; take ansible-playbook's figures from an earlier --json")
    parser.add_argument("--from-json", type=Path, nargs="+", metavar="ROWS_JSON",
                        help="measure nothing: print the table and the model of earlier --json files")
    args = parser.parse_args()
    if args.from_json:
        rows = sorted((r for f in args.from_json for r in json.loads(f.read_text())), key=lambda r: r["nodes"])
        print_table(rows)
        print_model(rows, os.cpu_count() or 1)
        return
    earlier = {r["nodes"]: r for r in json.loads(args.only_sparkguard.read_text())} if args.only_sparkguard else {}
    rows = []
    for count in args.nodes:
        with tempfile.TemporaryDirectory(prefix="sg-fleet-") as tmp:
            with booted_nodes(count, NET) as (state, inventory):
                verbose_sshd(state)
                sg = sparkguard_runs(state, inventory, args.reruns)
            if args.only_sparkguard:
                rows.append({**earlier[count], **{k: v for k, v in row(count, sg, sg).items() if k.startswith("sg_")}})
                print(json.dumps(rows[-1]), flush=True)
                continue
            with booted_nodes(count, NET) as (state, inventory):
                verbose_sshd(state)
                an = ansible_runs(state, inventory, count, args.ansible_reruns or args.reruns, Path(tmp))
        rows.append(row(count, sg, an))
        print(json.dumps(rows[-1]), flush=True)
    print_table(rows)
    print_model(rows, os.cpu_count() or 1)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
