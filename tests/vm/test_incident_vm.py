"""The incident on a real kernel, treatment only, and sparkguard-train --docker against the real engine.

One VM from the "incident" image (tests/vm/harness.py VARIANTS: Debian's docker.io,
Prometheus, node_exporter and Alertmanager baked in; its own kernel, cgroup v2, a
swap disk), the site applied (earlyoom, swap, monitoring with a webhook receiver on
the VM's loopback, recovery). tests/vm/incident.py has the mechanics and the
stand-ins; bench/incident runs the control arm beside it.

- The seed's job: a plain ``docker run --memory 256m`` trainer whose memory is a
  hugetlb memfd kept by two forked workers (STAND-IN for driver memory, charged to
  no cgroup), next to a vLLM stand-in and a notebook. It dies first and whole,
  SSH never stalls more than a few seconds, the kill's alert reaches the
  receiver, and swap is still on afterwards. The guard's lines are the shipped
  ones (fractions of MemTotal).
- ``sparkguard-train --docker`` with every ending (exit, Ctrl-C, stopping the
  target, SIGTERM and SIGKILL to the trainer) leaves no container behind and
  swap back on (SIGKILL to the docker client: tests/sandbox/test_train_operator_paths.py).
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import require_root_and_tools
from tests.vm import applying, incident
from tests.vm import harness as vm
from tests.vm.conftest import booted
from tests.waiting import wait_for

# ~10 min under TCG (image with docker baked in, cached; one boot, one apply, shared by every test here).
pytestmark = [pytest.mark.vm, pytest.mark.incident_vm, pytest.mark.replay]
KEEP = {"base", "earlyoom", "swap", "monitoring", "recovery"}
TARGET = "sparkguard-training.target"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    require_root_and_tools("VM tests (debootstrap, chroot, mke2fs -d, qemu)", vm.missing_tools())
    image = incident.ensure_image()

    def set_up(booted_node) -> None:
        incident.install(booted_node)
        booted_node.check("sysctl -q vm.nr_overcommit_hugepages=1024")
        # One apply (TCG is slow): the site's second apply is asserted clean by the sandbox and VM role tests.
        directory = applying.vm_inventory(booted_node, tmp_path_factory.mktemp("incident-inv"),
                                          incident.treatment_vars(), KEEP)
        applying.apply(directory)
        booted_node.inventory = directory

    with booted(image, tmp_path_factory.mktemp("vm-incident"), setup=set_up, name="vm-incident",
                swap_mib=512) as booted_node:
        yield booted_node


def sh(node, command: str, timeout: float = 120) -> str:
    """A control command on the kept connection (VM.run): a fresh login per poll costs the guest a second."""
    rc, out, err = node.run(command, timeout=timeout)
    assert rc == 0, (command, out, err)
    return out.strip()


def done(node) -> bool:
    out = sh(node, f"docker inspect -f '{{{{.State.Running}}}}' {incident.TRAINER}; "
                   f"grep -c EarlyoomKilledProcess {incident.HOOK_LOG} 2>/dev/null || true")
    lines = out.split()
    return lines[:1] == ["false"] and len(lines) > 1 and int(lines[1] or 0) > 0


def test_the_seeds_job_dies_first_and_whole_and_the_node_stays_reachable(node):
    from sparkguard.roles.vllm.settings import VllmSettings

    incident.start_bystanders(node, VllmSettings().oom_score_adj)
    run = incident.run_incident(node, "treatment", limit_s=240, term_line_kib=incident.term_line_kib(node), done=done)
    summary = json.dumps(run.summary(), indent=1)
    # The job died: the container exited by SIGTERM (its workers with it), killed by earlyoom, the first victim.
    assert run.trainer_state.get("Status") == "exited" and run.trainer_state.get("ExitCode") in (143, 137), summary
    signalled = [line for line in run.kills if "sending SIG" in line]
    assert signalled and '"python3"' in signalled[0], summary
    assert not any("VLLM::EngineCor" in line or "sg-notebook" in line for line in signalled), summary
    assert run.survivors == {"vllm": True, "notebook": True, "sshd": True}, summary
    assert not run.kernel_kills, summary                  # the guard acted; the kernel's OOM killer never had to
    # The memory no cgroup saw: the trainer held far more than its container's 256 MiB.
    held = max(e.get("allocated_mib", 0) for e in run.trainer_events)
    assert held > 256, summary
    # Reachable throughout. Under TCG a fresh SSH login while the guard acts takes up to ~9 s (CI measured
    # 8.8 s, one probe past its 10 s timeout): at most two probes in a row unanswered, never "unresponsive"
    # (the control is silent from 571 s on and never answers again within its 900 s bound).
    assert run.unresponsive_at is None and run.longest_gap_s <= 2 * incident.PROBE_TIMEOUT_S, summary
    # The kill's alert reached the receiver on the node's loopback; nothing paged falsely (the replay found
    # NodeExporterDown and SparkguardMetricsStale paging for the package's dropped localhost:9100 target).
    alerts = set(run.summary()["alerts"])
    assert "EarlyoomKilledProcess" in alerts, summary
    assert alerts <= {"EarlyoomKilledProcess", "NodeMemoryExhaustionForecast", "NodeMemoryAvailableLow",
                      "NodeMemoryAvailableCritical"}, summary
    # Swap is still on (the policy keeps it for the system; -s 100,100: it never delayed the kill).
    assert run.samples and run.samples[-1][2] > 0, summary
    sh(node, f"docker rm -f {incident.TRAINER} >/dev/null 2>&1; systemctl stop sg-vllm sg-notebook; true")


# The trainer inside the container: python3 with no SIGTERM handler (like a trainer), says where it runs.
TRAINER = ("/usr/bin/python3 -c \"import os, time; open('/out/ctr.pid', 'w').write(str(os.getpid())); "
           "[time.sleep(0.2) for _ in iter(int, 1)]\"")
EXITING = "/usr/bin/python3 -c \"import time; time.sleep(1); raise SystemExit(3)\""
# ending -> (the job's exit code)
ENDINGS = {"exit": 3, "ctrl-c": 143, "stop-target": 143, "sigterm-trainer": 143, "sigkill-trainer": 137}


def containers(node) -> str:
    return sh(node, "docker ps -aq --filter name=sparkguard-job-")


def trainer_pid(node) -> str:
    """The trainer's host PID: the child of the container's init (sparkguard-train adds --init)."""
    container = sh(node, "docker ps -q --filter name=sparkguard-job-")
    init = sh(node, f"docker inspect -f '{{{{.State.Pid}}}}' {container}")
    return sh(node, f"cat /proc/{init}/task/{init}/children").split()[0]




@pytest.mark.parametrize("ending", ENDINGS)
def test_sparkguard_train_docker_leaves_no_container_however_it_ends(node, ending):
    swap_before = sh(node, "swapon --show=NAME --noheadings")
    assert swap_before, "the VM boots with swap on"
    command = EXITING if ending == "exit" else TRAINER
    sh(node, f"rm -f {incident.WORK}/ctr.pid /tmp/sg-launcher.rc; cat > /tmp/sg-launch.sh <<'EOF'\n"
             f"sparkguard-train --name ctr --docker -- docker run --rm -v {incident.WORK}:/out "
             f"{incident.TRAINER_IMAGE} {command}\n"
             "echo $? > /tmp/sg-launcher.rc\nEOF\n(setsid sh /tmp/sg-launch.sh > /tmp/sg-launcher.log 2>&1 &)")
    if ending != "exit":
        wait_for(lambda: sh(node, f"cat {incident.WORK}/ctr.pid 2>/dev/null || true"), 60, "the trainer", every=1)
        assert sh(node, "swapon --show=NAME --noheadings") == "", "training mode turns swap off"
        pid = trainer_pid(node)
        assert sh(node, f"cat /proc/{pid}/oom_score_adj") == "1000"
        if ending == "ctrl-c":
            sh(node, "kill -INT $(pgrep -f '[s]parkguard-train --name ctr')")
        elif ending == "stop-target":
            sh(node, f"systemctl stop {TARGET}")
        elif ending == "sigterm-trainer":
            sh(node, f"kill -TERM {pid}")
        elif ending == "sigkill-trainer":
            sh(node, f"kill -KILL {pid}")
    rc = wait_for(lambda: sh(node, "cat /tmp/sg-launcher.rc 2>/dev/null || true"), timeout=120,
                  what="the launcher's end", every=1)
    wait_for(lambda: containers(node) == "", timeout=60, what="the container's removal", every=1)
    wait_for(lambda: sh(node, f"systemctl is-active {TARGET} || true") == "inactive", timeout=60,
             what="training mode's end", every=1)
    assert sh(node, "swapon --show=NAME --noheadings") == swap_before, "swap is back on afterwards"
    record = json.loads(sh(node, "cat /var/lib/sparkguard/train/last.json"))
    assert record["container_removed"] is True, record
    assert record["exit_code"] == ENDINGS[ending] and int(rc) == ENDINGS[ending], record
