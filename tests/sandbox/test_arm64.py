"""The site on an arm64 node: every target but Strix Halo runs aarch64 user space (DGX Spark / GB10, GH200,
Jetson Thor), and this is where sparkguard's packages and node-side programs run as arm64 code.

One bookworm arm64 node (127.0.85.x), booted by `sparkguard sandbox up --arch arm64`: the rootfs is Debian's
arm64 archive, and every program on it (systemd, sshd, apt, earlyoom, Prometheus, python3, sparkguard's
launcher, agent and collector) runs under qemu user emulation through the kernel's binfmt_misc
(sparkguard/dev/emulation.py). The kernel is still this machine's: its page size, its cgroups, its MemTotal.
docs/arm64.md says what that proves and what still needs a real machine.

Few tests, each for something only an arm64 user space can show. All but the one-victim replay run beside
the VM tier; the replay sizes its lines from the host's MemAvailable, so the full run takes it alone, with
the other replays (pyproject's "replay" marker), on a node of its own.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sparkguard.dev import sandbox
from sparkguard.engine.converge import site_deploy
from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.conftest import run_cli
from tests.replay import DEVICE, Launch, ReplayPlan, assert_incident_outcome, run_cell
from tests.reporting import report
from tests.sandbox.conftest import booted_sandbox, net, wait_for

NODE = "node-1"
# The example site's roles on this node: monitoring on (no Alertmanager receiver here), GPU ranking every 0.5 s.
SITE = ("    monitoring: {enabled: true, alertmanager: {mode: none}}\n"
        "    earlyoom: {gpu_ranking_interval_s: 0.5}\n")
TIMES: dict[str, float] = {}
# STAND-IN for the driver's memory under emulation: a hugetlb memfd whose pages fallocate allocates and nothing
# maps (tools/sparkguard-uma-hog --unmapped), held through its descriptor as the driver's memory is. qemu user
# emulation cannot map a hugetlb file (EINVAL), and a hugetlb mapping it makes never shows in HugetlbPages.
# The pages are real host memory; no per-process counter sees them, so the job is one sparkguard marks.
ONE_VICTIM = Launch("sparkguard-train, arm64 (unmapped hugetlb memfd)", "sparkguard-train --name replay -- {hog}",
                    shape="--memfd --unmapped", marked=True, record=True)


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    started = time.monotonic()
    with booted_sandbox(tmp_path_factory, "bookworm", net("127.0.85"), 1, arch="arm64") as handle:
        TIMES["boot"] = time.monotonic() - started
        yield handle
    report("arm64 node (bookworm, qemu user emulation): " + ", ".join(f"{k} {v:.0f} s" for k, v in TIMES.items()))


def sh(arm, command: str) -> str:
    rc, out, err = arm.ssh(NODE, command)
    assert rc == 0, (command, out, err)
    return out.strip()


def test_the_node_runs_arm64_user_space_and_says_so(arm):
    assert sh(arm, "uname -m; dpkg --print-architecture").split() == ["aarch64", "arm64"]
    assert [(row["arch"], row["running"], row["ssh"]) for row in sandbox.status(arm.state_dir)] == [("arm64", True, True)]
    handler = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64").read_text()
    assert handler.startswith("enabled") and "F" in handler.split("flags:")[1].split()[0]


def test_an_amd64_only_vllm_image_is_refused_where_auto_turns_out_aarch64(arm, tmp_path):
    """Nothing declares the architecture (device profile auto): the node's own uname decides, before any change."""
    inventory = arm.inventory_with(tmp_path / "vllm", "    node: {device_profile: auto}\n    vllm:\n"
                                   "      cuda_total_gib: 100\n      models: {small: {model: org/small, shape: Llama-3.1-8B,"
                                   " max_model_len: 4096, max_num_seqs: 4, port: 8000, weights_dtype: fp8, kv_cache_gib: 1}}\n")
    with pytest.raises(ConfigError) as refused:
        run_deploy(load_inventory(inventory), site_deploy)
    text = "\n".join(refused.value.paragraphs())
    assert "field 'vllm.image'" in text and "this aarch64 node" in text and "amd64-only" in text, text
    assert sh(arm, "test -e /etc/sparkguard && echo touched || echo untouched") == "untouched"


def test_the_site_applies_with_arm64_packages_a_second_apply_changes_nothing_and_audit_is_green(arm, tmp_path):
    inventory = arm.inventory_with(tmp_path / "site", SITE)
    started = time.monotonic()
    first = run_deploy(load_inventory(inventory), site_deploy)
    TIMES["fresh apply"] = time.monotonic() - started
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    assert first.hosts[0].node.arch == "aarch64"
    packages = sh(arm, "dpkg-query -W -f '${Package} ${Architecture}\\n' earlyoom prometheus "
                       "prometheus-node-exporter python3")
    assert sorted(packages.splitlines()) == ["earlyoom arm64", "prometheus arm64", "prometheus-node-exporter arm64",
                                             "python3 arm64"]
    started = time.monotonic()
    second = run_deploy(load_inventory(inventory), site_deploy)
    TIMES["no-op apply"] = time.monotonic() - started
    assert second.ok and second.changed == 0, second.hosts[0].changed_names
    audit = run_cli("audit", str(inventory), "--json")
    checks = json.loads(audit.stdout)["hosts"][0]["checks"]
    assert audit.returncode == 0, [c for c in checks if not c["ok"]]
    assert sh(arm, "systemctl is-active earlyoom prometheus prometheus-node-exporter "
                   "sparkguard-gpu-ranking").split() == ["active"] * 4


def test_sparkguard_train_runs_a_job_and_leaves_training_mode(arm):
    during = sh(arm, "sparkguard-train --name arm -- sh -c 'uname -m; systemctl is-active sparkguard-training.target'")
    assert during.split()[-2:] == ["aarch64", "active"]
    assert sh(arm, "systemctl is-active sparkguard-training.target || true") == "inactive"


def test_the_gpu_ranking_agent_ranks_a_device_holder_in_one_pass(arm):
    """STAND-IN /dev/nvidia-uvm (a regular file, as in every replay: tests/replay.py), no nvidia-smi: one --once
    pass of the shipped agent finds the process that holds the device open and raises it into the GPU-holder
    band, as on a node whose driver does not answer. (Under emulation the driver-memory stand-in is in no
    process's counters, so ranking by memory is not shown here: docs/arm64.md.)"""
    sh(arm, f"rm -f /usr/local/bin/nvidia-smi; [ -e {DEVICE} ] || install -m 666 /dev/null {DEVICE}")
    sh(arm, "systemctl stop sparkguard-gpu-ranking")
    try:
        sh(arm, f"systemd-run --unit sg-arm-holder -q python3 -c \"import ctypes, time; "
                f"ctypes.CDLL(None).prctl(15, b'jaxtrain', 0, 0, 0); d = open('{DEVICE}'); time.sleep(600)\"")
        holder = wait_for(lambda: sh(arm, "pgrep -x jaxtrain || true"), what="the device holder")
        sh(arm, "/usr/local/lib/sparkguard/gpu-ranking --config /etc/sparkguard/gpu-ranking.json --once")
        status = json.loads(sh(arm, "cat /run/sparkguard/gpu-ranking.json"))
        assert status["state"] == "no-nvidia-smi" and status["device_holders"] == 1, status
        assert [job["id"].split(":")[0] for job in status["jobs"]] == [holder], status
        assert 600 <= int(sh(arm, f"cat /proc/{holder}/oom_score_adj")) < 1000
    finally:
        arm.ssh(NODE, "systemctl stop sg-arm-holder; systemctl reset-failed sg-arm-holder; "
                      "systemctl start sparkguard-gpu-ranking")


@pytest.mark.replay
def test_the_one_victim_replay_holds_the_trainer_dies_first_serving_and_ssh_stay(arm, tmp_path, monkeypatch):
    """The incident's one-victim cell with arm64 earlyoom, launcher, collector and agent: the job's memory (the
    STAND-IN above) takes MemAvailable past the SIGTERM line; the trainer is signalled first and alone; the vLLM
    stand-in (the larger RSS), the notebook, sshd and an open SSH session survive; the kill is counted once."""
    monkeypatch.setenv("SPARKGUARD_LAB_THRESHOLDS", "1")
    plan = ReplayPlan.from_host()
    # As every replay: earlyoom's lab lines (just below the host's MemAvailable) and no monitoring, whose alert
    # lines must sit below earlyoom's; the kills collector is earlyoom's own. Only the roles the cell runs on
    # (base, earlyoom, swap for sparkguard-train): every operation costs seconds under emulation, and the
    # whole site on arm64 is the test above.
    inventory = arm.inventory_with(tmp_path / "replay", f"    earlyoom: {{term_percent: {plan.term_percent}, "
                                   f"kill_percent: {plan.kill_percent}, report_interval_s: 1, "
                                   "gpu_ranking_interval_s: 0.5}\n"
                                   "    recovery: {enabled: false}\n    vllm: {enabled: false}\n")
    started = time.monotonic()
    applied = run_deploy(load_inventory(inventory), site_deploy)
    assert applied.ok, json.dumps(applied.as_dict(), indent=1, default=str)
    TIMES["replay's apply"] = time.monotonic() - started
    started = time.monotonic()
    # The creep of the replays before they were sped up (32 MiB steps, ~8 s to the line): every pass of the
    # GPU ranking agent, and every login the cell makes, runs emulated here.
    result = run_cell(arm, NODE, plan, ONE_VICTIM, creep_step_mib=32)
    TIMES["one-victim replay"] = time.monotonic() - started
    report(f"arm64 one-victim replay (earlyoom 1.7 under emulation): SIGTERM {result.reaction_s * 1000:.0f} ms "
           f"after the line, job gone {result.job_gone_s or 0:.1f} s after the signal"
           if result.reaction_s is not None else "arm64 one-victim replay: no SIGTERM")
    assert_incident_outcome(result, ONE_VICTIM)
