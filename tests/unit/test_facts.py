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

from sparkguard import facts
from sparkguard.facts import classify_device, parse_probe

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
    assert info.raw["earlyoom_version"] == "earlyoom 1.7"  # kept for the role that reads it
    assert info.swaps[0].path == "/swap.img" and info.swaps[0].size_kib == 16777212
    assert info.cgroup2
    assert (info.distro_id, info.arch) == ("ubuntu", "aarch64")


def test_no_swap_no_gpu():
    info = parse_probe("memtotal_kb=1000\nswaps=\ngpu_name=\n")
    assert info.swaps == () and info.device_class == "cpu-only" and not info.unified_memory


def test_the_core_probe_names_no_role_and_each_registered_roles_lines_join_it(monkeypatch):
    """The core's probe reads the node only; a role's own facts (earlyoom's versions) come from its fact_probe."""
    from sparkguard import registry
    from sparkguard.roles import ROLES

    assert "earlyoom" not in facts.PROBE and "nohang" not in facts.PROBE
    monkeypatch.setattr(registry, "_roles", ())
    assert facts.probe_lines() == facts.PROBE
    registry.use(ROLES)
    lines = facts.probe_lines()
    for role in ROLES:
        for line in role.fact_probe:
            assert f"\n{line}\n" in lines
    from sparkguard.engine.probe import NodeFacts

    assert "earlyoom_version=" in NodeFacts().command()
