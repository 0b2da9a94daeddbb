"""Node classification from the probe's raw output.

The GPU strings are recorded real outputs: `nvidia-smi --query-gpu=name` on a
DGX Spark prints "NVIDIA GB10" (NVIDIA/dgx-spark-playbooks#97, nvitop#208), a
GH200 prints "NVIDIA GH200 480GB"; Jetson Thor's /proc/device-tree/model is
"NVIDIA Jetson AGX Thor Developer Kit"; Strix Halo's cpuinfo model name is
"AMD RYZEN AI MAX+ 395 w/ Radeon 8060S". No GPU exists here, so these are the
only mocks in the suite.
"""

from __future__ import annotations

import pytest

from sparkguard.facts import classify_device, parse_earlyoom_version, parse_probe

SPARK_PROBE = """memtotal_kb=127605284
arch=aarch64
distro_id=ubuntu
distro_version=24.04
init=systemd
earlyoom_version=earlyoom 1.7
swaps=/swap.img:file:16777212;
gpu_name=NVIDIA GB10
dt_model=
cpu_model=
rocm_gfx=
cgroup2=1
"""


@pytest.mark.parametrize("gpu,dt,cpu,gfx,expected", [
    ("NVIDIA GB10", "", "", "", "dgx-spark"),
    ("NVIDIA GH200 480GB", "", "", "", "gh200"),
    ("", "NVIDIA Jetson AGX Thor Developer Kit", "", "", "jetson"),
    ("Orin (nvgpu)", "", "", "", "jetson"),
    ("", "", "AMD RYZEN AI MAX+ 395 w/ Radeon 8060S", "", "amd-apu"),
    ("", "", "AMD Eng Sample", "gfx1151", "amd-apu"),
    ("NVIDIA H100 80GB HBM3", "", "Intel(R) Xeon(R) Platinum 8480+", "", "discrete"),
    ("", "", "Intel(R) Xeon(R) CPU", "", "cpu-only"),
])
def test_classify(gpu, dt, cpu, gfx, expected):
    assert classify_device(gpu, dt, cpu, gfx)[0] == expected


def test_parse_probe_spark():
    info = parse_probe(SPARK_PROBE)
    assert info.unified_memory and info.device_class == "dgx-spark"
    assert round(info.memory_total_gib, 1) == 121.7
    assert info.earlyoom_version == (1, 7)
    assert info.swaps[0].path == "/swap.img" and info.swaps[0].size_kib == 16777212
    assert info.cgroup2
    assert (info.distro_id, info.arch) == ("ubuntu", "aarch64")


@pytest.mark.parametrize("text,expected", [
    ("earlyoom 1.7", (1, 7)),
    ("earlyoom v1.8.2", (1, 8, 2)),
    ("sh: 1: earlyoom: not found", None),
    ("", None),
    ("(none)", None),
    ("1:1.8.2-1", (1, 8, 2)),            # an epoch
    ("1.7-2build1", (1, 7)),             # Ubuntu rebuild
    ("1.9.0-1ubuntu1", (1, 9, 0)),       # Ubuntu delta
    ("2:1.10-1", (1, 10)),
    ("earlyoom (devel)", None),
])
def test_earlyoom_version(text, expected):
    assert parse_earlyoom_version(text) == expected


def test_no_swap_no_gpu():
    info = parse_probe("memtotal_kb=1000\nswaps=\ngpu_name=\n")
    assert info.swaps == () and info.device_class == "cpu-only" and not info.unified_memory
