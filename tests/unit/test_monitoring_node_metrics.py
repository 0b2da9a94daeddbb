"""sparkguard-node-metrics (the textfile script), run here against fake /proc, cgroup trees and nvidia-smi.

The nvidia-smi sample (tests/unit/data/nvidia-smi-compute-apps.gb10.csv) is a real DGX Spark (GB10)
line from a field report (mostlygeek/llama-swap#782: `--query-compute-apps=gpu_uuid,pid,process_name,
used_memory --format=csv,noheader,nounits` -> `GPU-..., 114687, /usr/local/bin/python, 19135`), with the
gpu_uuid column (elided in the report) dropped to match the query the script runs. It was NOT recorded on
a GPU here: this machine has none, and no device machine was lent to this task.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from roles.monitoring.state import NODE_METRICS_SCRIPT, NODE_METRICS_SERVICE
from sparkguard.inventory import load_inventory
from sparkguard.render import render_inventory
from tests.conftest import REPO

SAMPLE = REPO / "tests/unit/data/nvidia-smi-compute-apps.gb10.csv"
MEMINFO = "MemTotal:       127605288 kB\nMemFree:         1000000 kB\nMemAvailable:    7605288 kB\n"


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render")
    render_inventory(load_inventory(REPO / "inventory" / "example"), out)
    return out / "spark-01" / NODE_METRICS_SCRIPT.lstrip("/")


def unit_args(script: Path) -> list[str]:
    """The arguments its unit (as rendered next to it) passes: the script is the same file on every node."""
    root = Path(str(script).removesuffix(NODE_METRICS_SCRIPT))
    unit = root / "etc/systemd/system" / NODE_METRICS_SERVICE
    line = next(line for line in unit.read_text().splitlines() if line.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))[1:]


def fake_bin(directory: Path, name: str, body: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def run(script: Path, tmp_path: Path, cgroup: str = "v2", smi: str | None = None, training: bool = False) -> dict:
    proc = tmp_path / "proc"
    proc.mkdir(exist_ok=True)
    (proc / "meminfo").write_text(MEMINFO)
    cg = tmp_path / "cgroup"
    if cgroup == "v2":
        for name, current, active, inactive in (("system.slice", 6 * 2**30, 2**30, 2**30),
                                                ("user.slice", 2**30, 0, 2**29)):
            (cg / name).mkdir(parents=True, exist_ok=True)
            (cg / name / "memory.current").write_text(f"{current}\n")
            (cg / name / "memory.stat").write_text(f"anon 1\nactive_file {active}\ninactive_file {inactive}\n")
        (cg / "cgroup.controllers").write_text("cpu memory\n")
        (cg / "init.scope").mkdir(exist_ok=True)  # no memory controller files: skipped
    elif cgroup == "v1":
        (cg / "memory").mkdir(parents=True, exist_ok=True)
        (cg / "memory/memory.usage_in_bytes").write_text(f"{8 * 2**30}\n")
        (cg / "memory/memory.stat").write_text(
            f"cache 1\nrss 2\ntotal_active_file {2**30}\ntotal_inactive_file {2**30}\ntotal_rss {6 * 2**30}\n")
    bindir = tmp_path / "bin"
    fake_bin(bindir, "systemctl", f"exit {0 if training else 3}\n")
    if smi is not None:
        fake_bin(bindir, "nvidia-smi", smi)
    out = tmp_path / "textfile" / "sparkguard_node.prom"
    out.parent.mkdir(exist_ok=True)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SG_PROC": str(proc), "SG_CGROUP": str(cg), "SG_OUT": str(out)}
    result = subprocess.run(["sh", str(script), *unit_args(script)], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in out.parent.iterdir()] == ["sparkguard_node.prom"]  # no temp file left behind
    samples = {}
    for line in out.read_text().splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def test_no_gpu_no_training_v2_cgroups(script, tmp_path):
    samples = run(script, tmp_path, "v2")
    assert samples["sparkguard_training_mode"] == 0
    assert samples["sparkguard_swap_allowed_during_training"] == 0
    assert samples['sparkguard_unified_memory{device_profile="dgx-spark"}'] == 1
    assert samples["sparkguard_nvidia_smi_up"] == 0
    assert not [k for k in samples if k.startswith("sparkguard_gpu_process_memory_bytes")]
    # used = (127605288 - 7605288) KiB = 120000000 KiB; cgroups hold 6+1 GiB minus 2.5 GiB of file pages.
    accounted = 6 * 2**30 - 2 * 2**30 + 2**30 - 2**29
    assert samples['sparkguard_memory_cgroup_accounted_bytes{cgroup_version="v2"}'] == accounted
    assert samples["sparkguard_memory_outside_cgroups_bytes"] == 120000000 * 1024 - accounted
    assert samples["sparkguard_node_metrics_timestamp_seconds"] > 1.7e9


def test_v1_cgroups_and_training_mode(script, tmp_path):
    samples = run(script, tmp_path, "v1", training=True)
    assert samples["sparkguard_training_mode"] == 1
    assert samples['sparkguard_memory_cgroup_accounted_bytes{cgroup_version="v1"}'] == 6 * 2**30
    assert samples["sparkguard_memory_outside_cgroups_bytes"] == 120000000 * 1024 - 6 * 2**30


def test_no_memory_cgroups_means_no_outside_figure(script, tmp_path):
    samples = run(script, tmp_path, "none")
    assert "sparkguard_memory_outside_cgroups_bytes" not in samples


def test_recorded_gb10_nvidia_smi_line(script, tmp_path):
    samples = run(script, tmp_path, smi=f"cat {SAMPLE}\n")
    assert samples["sparkguard_nvidia_smi_up"] == 1
    assert samples['sparkguard_gpu_process_memory_bytes{pid="114687",process="/usr/local/bin/python"}'] == 19135 * 2**20


def test_nvidia_smi_odd_values_and_names(script, tmp_path):
    smi = ("cat <<'EOF'\n"
           "4242, VLLM::EngineCore, 98304\n"
           "77, [Not Found], [N/A]\n"
           '99, /opt/my "odd", name, 512\n'
           "EOF\n")
    samples = run(script, tmp_path, smi=smi)
    assert samples['sparkguard_gpu_process_memory_bytes{pid="4242",process="VLLM::EngineCore"}'] == 98304 * 2**20
    assert samples['sparkguard_gpu_process_memory_bytes{pid="99",process="/opt/my \\"odd\\", name"}'] == 512 * 2**20
    assert not [k for k in samples if 'pid="77"' in k]


def test_failing_nvidia_smi_is_graceful(script, tmp_path):
    samples = run(script, tmp_path, smi="echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
    assert samples["sparkguard_nvidia_smi_up"] == 0
    assert "sparkguard_training_mode" in samples


def test_promtool_accepts_the_textfile(script, tmp_path):
    import shutil

    promtool = shutil.which("promtool") or str(REPO / ".venv/bin/promtool")
    if not os.path.exists(promtool):
        pytest.skip("promtool not found")
    run(script, tmp_path, "v2", smi="cat <<'EOF'\n4242, VLLM::EngineCore, 98304\nEOF\n")
    text = (tmp_path / "textfile/sparkguard_node.prom").read_text()
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("drop,replace", [
    ("--textfile", None), (None, ("--unified", "maybe")), (None, ("--swap-allowed", "yes")),
    (None, ("--device-profile", "dgx spark")), (None, ("--training-target", "a;b")),
])
def test_a_wrong_command_line_writes_nothing_and_says_how(script, tmp_path, drop, replace):
    args = unit_args(script)
    if drop:
        index = args.index(drop)
        del args[index:index + 2]
    if replace:
        args[args.index(replace[0]) + 1] = replace[1]
    out = tmp_path / "metrics.prom"
    result = subprocess.run(["sh", str(script), *args], env={"PATH": "/usr/bin:/bin", "SG_OUT": str(out)},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and "usage: node-metrics" in result.stderr
    assert not out.exists()
