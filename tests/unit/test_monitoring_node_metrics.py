"""sparkguard-node-metrics (the textfile script), run here against fake /proc, cgroup trees and nvidia-smi.

The nvidia-smi sample (tests/unit/data/nvidia-smi-compute-apps.gb10.csv) is a real DGX Spark (GB10)
line from a field report (mostlygeek/llama-swap#782: `--query-compute-apps=gpu_uuid,pid,process_name,
used_memory --format=csv,noheader,nounits` -> `GPU-..., 114687, /usr/local/bin/python, 19135`), with the
gpu_uuid column (elided in the report) dropped to match the query the script runs. It was NOT recorded on
a GPU here: this machine has none, and no device machine was lent to this task.

The kernel OOM lines (KERNEL_LOG) are what journalctl 252 (Debian 12) printed for
``journalctl -k -b 0 -p err -q -a -o short-unix``, byte for byte, from a journal file that
systemd-journal-remote wrote from export-format entries shaped like journald's kernel records
(_TRANSPORT=kernel, MESSAGE as mm/oom_kill.c prints it, raw bytes as journald stores them after
unescaping /dev/kmsg). They were NOT recorded from a real OOM kill: no kernel OOM was provoked here.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from sparkguard.engine.render import render_inventory
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.monitoring.state import NODE_METRICS_SCRIPT, NODE_METRICS_SERVICE
from tests.conftest import REPO

SAMPLE = REPO / "tests/unit/data/nvidia-smi-compute-apps.gb10.csv"
KERNEL_LOG = b"".join([
    b'1733400001.123456 spark-01 kernel: NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] '
    b'(0x00000051) returned from _memdescAllocInternal(pMemDesc) @ mem_desc.c:1359\n',
    b'1733400002.123456 spark-01 kernel: Out of memory: Killed process 4242 (pt_main_thread) total-vm:98765432kB, '
    b'anon-rss:51234567kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:104567kB oom_score_adj:0\n',
    b'1733400003.123456 spark-01 kernel: Memory cgroup out of memory: Killed process 77 (VLLM::EngineCor) '
    b'total-vm:1234567kB, anon-rss:1000000kB, file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:4096kB oom_score_adj:0\n',
    # a backslash, a quote and a byte that is not UTF-8 (0xff) in the process name
    b'1733400004.123456 spark-01 kernel: Out of memory: Killed process 99 (a\\b"c\xff) total-vm:1024kB, '
    b'anon-rss:512kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:48kB oom_score_adj:1000\n',
    # a name that looks like the end of the name
    b'1733400005.123456 spark-01 kernel: Out of memory: Killed process 100 (x) total-vm:9) total-vm:1024kB, '
    b'anon-rss:512kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:48kB oom_score_adj:0\n',
    # a newline in the name: journalctl continues the entry, indented by the prefix's width
    b'1733400006.123456 spark-01 kernel: Out of memory: Killed process 101 (new\n',
    b'                                   line) total-vm:1024kB, anon-rss:512kB, file-rss:0kB, shmem-rss:0kB, '
    b'UID:1001 pgtables:48kB oom_score_adj:0\n',
    # valid UTF-8 stays, a tab (control character) does not
    b'1733400007.123456 spark-01 kernel: Out of memory (oom_kill_allocating_task): Killed process 102 (caf\xc3\xa9\t) '
    b'total-vm:1024kB, anon-rss:512kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:48kB oom_score_adj:0\n',
    b'1733400008.123456 spark-01 kernel: Out of memory: Killed process 4343 (pt_main_thread) total-vm:98765432kB, '
    b'anon-rss:51234567kB, file-rss:1234kB, shmem-rss:0kB, UID:1000 pgtables:104567kB oom_score_adj:0\n',
])
PROBE = b"1733400009.000000 spark-01 kernel: usb 1-1: new high-speed USB device number 3 using xhci_hcd\n"
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


def fake_journalctl(bindir: Path, tmp_path: Path, journal: bytes | None, rc: int = 0) -> None:
    """journalctl: ``None`` = no kernel log to read (the probe, ``-n 1``, prints nothing); otherwise the
    probe gets a line and the read (``-p err``) prints ``journal`` and exits ``rc``. Records its arguments."""
    data = tmp_path / "journal.out"
    data.write_bytes(journal or b"")
    probe = "" if journal is None else f"printf '%s' {shlex.quote(PROBE.decode())}"
    fake_bin(bindir, "journalctl", f'echo "$*" >> {shlex.quote(str(tmp_path / "journalctl.args"))}\n'
                                   f'case " $* " in *" -n 1 "*) {probe or ":"}; exit 0 ;; esac\n'
                                   f"cat {shlex.quote(str(data))}\nexit {rc}\n")


def run(script: Path, tmp_path: Path, cgroup: str = "v2", smi: str | None = None, training: bool = False,
        journal: bytes | None = None, journal_rc: int = 0) -> dict:
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
    fake_journalctl(bindir, tmp_path, journal, journal_rc)  # never the host's own kernel log
    out = tmp_path / "textfile" / "sparkguard_node.prom"
    out.parent.mkdir(exist_ok=True)
    env = {"PATH": f"{bindir}:/usr/bin:/bin", "SG_PROC": str(proc), "SG_CGROUP": str(cg), "SG_OUT": str(out)}
    result = subprocess.run(["sh", str(script), *unit_args(script)], env=env, capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    assert [p.name for p in out.parent.iterdir()] == ["sparkguard_node.prom"]  # no temp file left behind
    samples = {}
    for line in out.read_bytes().decode("utf-8").splitlines():  # strict: the textfile must be UTF-8
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


# ---------------------------------------------------------------- kernel OOM kills (the kernel log)
def promtool_check_metrics(text: bytes) -> subprocess.CompletedProcess:
    import shutil

    promtool = shutil.which("promtool") or str(REPO / ".venv/bin/promtool")
    if not os.path.exists(promtool):
        pytest.skip("promtool not found")
    return subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True)


def oom_samples(samples: dict) -> dict:
    return {k: v for k, v in samples.items() if k.startswith("sparkguard_kernel_oom_")}


def test_kernel_oom_kills_from_recorded_kernel_lines(script, tmp_path):
    samples = run(script, tmp_path, journal=KERNEL_LOG)
    fffd = "\N{REPLACEMENT CHARACTER}"
    assert samples["sparkguard_kernel_log_up"] == 1
    victims = {
        'victim="pt_main_thread",scope="node"': (2, 1733400008.123456),
        'victim="VLLM::EngineCor",scope="cgroup"': (1, 1733400003.123456),
        f'victim="a\\\\b\\"c{fffd}",scope="node"': (1, 1733400004.123456),  # a\b"c<0xff>
        'victim="x) total-vm:9",scope="node"': (1, 1733400005.123456),
        'victim="new\\nline",scope="node"': (1, 1733400006.123456),
        f'victim="café{fffd}",scope="node"': (1, 1733400007.123456),      # oom_kill_allocating_task
    }
    expected = {}
    for labels, (kills, when) in victims.items():
        expected[f"sparkguard_kernel_oom_kills_total{{{labels}}}"] = kills
        expected[f"sparkguard_kernel_oom_last_kill_timestamp_seconds{{{labels}}}"] = when
    assert oom_samples(samples) == pytest.approx(expected)  # the NVRM "Out of memory" line is no kill
    # one bounded read: this boot's kernel entries at priority err or above, non-UTF-8 messages in full
    args = (tmp_path / "journalctl.args").read_text().splitlines()
    assert args == ["-k -b 0 -n 1 -q -o short-unix --no-pager", "-k -b 0 -p err -q -a -o short-unix --no-pager"]


def test_the_textfile_with_hostile_victim_names_passes_promtool(script, tmp_path):
    run(script, tmp_path, journal=KERNEL_LOG, smi="printf '4242, /opt/\\377x\\\\y, 512\\n'\n")
    text = (tmp_path / "textfile/sparkguard_node.prom").read_bytes()
    check = promtool_check_metrics(text)
    assert check.returncode == 0, check.stdout + check.stderr
    assert 'process="/opt/\N{REPLACEMENT CHARACTER}x\\\\y"'.encode() in text  # nvidia-smi names: same escaping
    # the check has teeth: the raw name, as the kernel printed it, is refused (node_exporter would drop the file)
    raw = b'sparkguard_kernel_oom_kills_total{victim="a\\\\b\\"c\xff",scope="node"} 1\n'
    assert promtool_check_metrics(raw).returncode != 0


def test_no_kernel_oom_kill_this_boot(script, tmp_path):
    samples = run(script, tmp_path, journal=b"")
    assert samples["sparkguard_kernel_log_up"] == 1
    assert not oom_samples(samples)


def test_no_kernel_log_to_read_is_not_no_kill(script, tmp_path):
    """No journal (Storage=none, a container, no permission): up 0, and no victim series at all."""
    samples = run(script, tmp_path, journal=None)
    assert samples["sparkguard_kernel_log_up"] == 0
    assert not oom_samples(samples)
    assert "sparkguard_training_mode" in samples


@pytest.mark.parametrize("rc", [1, 124])  # journalctl failed; timeout killed it after 10 s
def test_a_failed_kernel_log_read_exports_no_short_count(script, tmp_path, rc):
    samples = run(script, tmp_path, journal=KERNEL_LOG[:300], journal_rc=rc)
    assert samples["sparkguard_kernel_log_up"] == 0
    assert not oom_samples(samples)


def test_victim_series_are_capped(script, tmp_path):
    """A user who names processes at will cannot grow the series without bound: 32, then "(other processes)"."""
    lines = b"".join(
        f"17334{i:05d}.000000 spark-01 kernel: Memory cgroup out of memory: Killed process {1000 + i} "
        f"(w{i:02d}) total-vm:1kB, anon-rss:1kB, file-rss:0kB, shmem-rss:0kB, UID:1001 pgtables:4kB "
        f"oom_score_adj:0\n".encode() for i in range(40))
    samples = oom_samples(run(script, tmp_path, journal=lines))
    kills = {k: v for k, v in samples.items() if k.startswith("sparkguard_kernel_oom_kills_total")}
    assert len(kills) == 33
    assert kills['sparkguard_kernel_oom_kills_total{victim="w31",scope="cgroup"}'] == 1
    assert kills['sparkguard_kernel_oom_kills_total{victim="(other processes)",scope="cgroup"}'] == 8
    assert samples['sparkguard_kernel_oom_last_kill_timestamp_seconds{victim="(other processes)",scope="cgroup"}'] \
        == 1733400039
