"""What a node is, read in one SSH round trip.

The classification matters because on unified-memory machines the GPU's memory
IS host RAM: driver allocations lower MemAvailable but show up in no cgroup and
in no process's RSS. Everything sparkguard configures (earlyoom lines, vLLM's
utilization fraction, alerts) depends on knowing that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from . import registry

# One round trip: every probe degrades to an empty value, never a failed host. The roles add their own
# lines (``Role.fact_probe``, see ``probe_lines``); their keys land in ``NodeInfo.raw``.
PROBE = r"""
LC_ALL=C
echo "memtotal_kb=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)"
echo "arch=$(uname -m)"
if [ -r /etc/os-release ]; then . /etc/os-release; fi
echo "distro_id=${ID:-}"
echo "distro_version=${VERSION_ID:-}"
echo "init=$(cat /proc/1/comm 2>/dev/null)"
echo "swaps=$(tail -n +2 /proc/swaps 2>/dev/null | awk '{printf "%s:%s:%s;", $1, $2, $3}')"
echo "gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)"
echo "dt_model=$(tr -d '\000' < /proc/device-tree/model 2>/dev/null)"
echo "cpu_model=$(grep -m1 -E '^(model name|Model)[[:space:]]*:' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
echo "rocm_gfx=$(rocminfo 2>/dev/null | grep -m1 -o 'gfx[0-9a-f]*')"
echo "cgroup2=$(test -e /sys/fs/cgroup/cgroup.controllers && echo 1 || echo 0)"
echo "container=$(systemd-detect-virt --container 2>/dev/null || echo none)"
"""

UNIFIED_CLASSES = {"dgx-spark", "gh200", "jetson", "amd-apu"}


@dataclass(frozen=True)
class SwapDevice:
    path: str
    kind: str
    size_kib: int


@dataclass(frozen=True)
class NodeInfo:
    """A node's classification and the few facts sparkguard decides on."""

    memory_total_bytes: int
    arch: str = ""
    distro_id: str = ""
    distro_version: str = ""
    init: str = ""
    swaps: tuple[SwapDevice, ...] = ()
    device_class: str = "cpu-only"
    device_evidence: str = ""
    cgroup2: bool = False
    container: bool = False
    # Every key the probe printed, the roles' own lines' included: a role reads its keys with its own parser.
    raw: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def unified_memory(self) -> bool:
        return self.device_class in UNIFIED_CLASSES

    @property
    def memory_total_gib(self) -> float:
        return self.memory_total_bytes / 2**30


def probe_lines() -> str:
    """The facts probe's shell lines: the core's, then each registered role's ``fact_probe`` lines."""
    extra = [line for role in registry.roles() for line in role.fact_probe] if registry.registered() else []
    return PROBE + "".join(f"{line}\n" for line in dict.fromkeys(extra))


def classify_device(gpu_name: str, dt_model: str, cpu_model: str, rocm_gfx: str) -> tuple[str, str]:
    """Return (device class, evidence) from the probe's raw strings.

    >>> classify_device("NVIDIA GB10", "", "", "")
    ('dgx-spark', 'nvidia-smi name: NVIDIA GB10')
    >>> classify_device("", "NVIDIA Jetson AGX Thor Developer Kit", "", "")[0]
    'jetson'
    >>> classify_device("", "", "AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", "gfx1151")[0]
    'amd-apu'
    >>> classify_device("NVIDIA H100 80GB HBM3", "", "", "")[0]
    'discrete'
    """
    if re.search(r"\bGB10\b", gpu_name) or "DGX Spark" in dt_model:
        source = f"nvidia-smi name: {gpu_name}" if gpu_name else f"device-tree model: {dt_model}"
        return "dgx-spark", source
    if "GH200" in gpu_name or "GH200" in dt_model:
        return "gh200", f"nvidia-smi name: {gpu_name or dt_model}"
    if re.search(r"Jetson|\bThor\b|\bOrin\b", dt_model) or re.search(r"\bOrin\b|\bThor\b", gpu_name):
        return "jetson", f"device-tree model: {dt_model or gpu_name}"
    # AMD APUs share system memory with the iGPU: Strix Halo is gfx1151, Strix Point gfx1150,
    # Phoenix gfx1103; the CPU brand string names "Ryzen AI MAX" on Strix Halo.
    if re.search(r"Ryzen AI MAX", cpu_model, re.IGNORECASE) or rocm_gfx in {"gfx1151", "gfx1150", "gfx1103"}:
        evidence = f"cpu: {cpu_model}" if cpu_model else f"rocm agent: {rocm_gfx}"
        return "amd-apu", evidence
    if gpu_name:
        return "discrete", f"nvidia-smi name: {gpu_name}"
    return "cpu-only", "no GPU found by nvidia-smi, device tree or rocminfo"


def parse_swaps(text: str) -> tuple[SwapDevice, ...]:
    devices = []
    for entry in filter(None, text.split(";")):
        path, kind, size = (entry.split(":") + ["", ""])[:3]
        devices.append(SwapDevice(path=path, kind=kind, size_kib=int(size or 0)))
    return tuple(devices)


def parse_probe(output: str) -> NodeInfo:
    raw: dict[str, str] = {}
    for line in output.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            raw[key.strip()] = value.strip()
    device_class, evidence = classify_device(
        raw.get("gpu_name", ""), raw.get("dt_model", ""), raw.get("cpu_model", ""), raw.get("rocm_gfx", "")
    )
    return NodeInfo(
        memory_total_bytes=int(raw.get("memtotal_kb") or 0) * 1024,
        arch=raw.get("arch", ""),
        distro_id=raw.get("distro_id", ""),
        distro_version=raw.get("distro_version", ""),
        init=raw.get("init", ""),
        swaps=parse_swaps(raw.get("swaps", "")),
        device_class=device_class,
        device_evidence=evidence,
        cgroup2=raw.get("cgroup2") == "1",
        container=raw.get("container", "none") not in ("", "none"),
        raw=raw,
    )
