"""What the GPU ranking agent's device scan costs per pass, with and without its cache, on this host's /proc.

Starts N sleeping processes holding F descriptors each (like a desktop node's daemons and a training job's
workers: ~1 MB each, bounded by MemAvailable, all killed at the end), then times, in CPU and wall ms per
pass: a full scan (every process's descriptors read: the agent without an inotify watch, after a device
open, and every DeviceScan.FULL_EVERY passes) and a watched pass (only holders and new processes read).
No GPU: the "device" is a temporary file, so no process holds it and every process is read once.

    bench/gpu-ranking-scan [--processes N] [--fds F] [--passes P]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import tempfile
import time
from pathlib import Path

AGENT = Path(__file__).resolve().parents[1] / "roles" / "earlyoom" / "files" / "gpu_ranking.py"


def load_agent():
    spec = importlib.util.spec_from_file_location("gpu_ranking", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def timed(passes: int, call) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(passes):
        call()
    return (time.process_time() - cpu) / passes * 1000, (time.perf_counter() - wall) / passes * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=800)
    parser.add_argument("--fds", type=int, default=40)
    parser.add_argument("--passes", type=int, default=10)
    args = parser.parse_args()
    if not 1 <= args.processes <= 4000 or not 0 <= args.fds <= 200 or not 1 <= args.passes <= 1000:
        parser.error("--processes 1..4000, --fds 0..200, --passes 1..1000")
    if args.processes * 2 > mem_available_mib() // 4:
        parser.error(f"{args.processes} processes would take more than a quarter of MemAvailable")
    agent = load_agent()
    opens = " ".join(f"{3 + i}</dev/null" for i in range(args.fds))
    workers = [subprocess.Popen(["bash", "-c", f"exec {opens} sleep 600"]) for _ in range(args.processes)]
    try:
        time.sleep(1.0)
        processes = sum(1 for e in os.scandir("/proc") if e.name.isdigit())
        with tempfile.NamedTemporaryFile() as device:
            devices = {device.name}
            scan = agent.DeviceScan("/proc")
            full_cpu, full_wall = timed(args.passes, lambda: agent.DeviceScan("/proc").holders(devices, watched=False))
            scan.holders(devices, watched=True)          # the first watched pass reads everything once
            scan.passes = 1
            cached_cpu, cached_wall = timed(args.passes, lambda: scan.holders(devices, watched=True))
            read = scan.read_last
        print(f"gpu-ranking device scan, {processes} processes on this host ({args.processes} started with "
              f"{args.fds} descriptors each), mean of {args.passes} passes:")
        print(f"  full scan (no watch, after a device open, 1 pass in {agent.DeviceScan.FULL_EVERY}): "
              f"{full_cpu:.1f} ms CPU, {full_wall:.1f} ms wall")
        print(f"  watched pass (holders and new processes only; {read} read): "
              f"{cached_cpu:.1f} ms CPU, {cached_wall:.1f} ms wall")
        every = agent.DeviceScan.FULL_EVERY
        print(f"  steady state at the default 2 s interval: {(full_cpu + (every - 1) * cached_cpu) / every / 20:.2f} % "
              f"of one core (was {full_cpu / 20:.2f} %)")
    finally:
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
