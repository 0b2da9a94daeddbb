"""sparkguard-train as operators run it: `sudo` from an ops account, and `--docker`.

- The ops user logs in over SSH and runs `sudo sparkguard-train`: the job runs as
  ops (with ops's HOME), the bookkeeping as root, and training mode is left
  afterwards; ops can read the outcome without sudo.
- `--docker` against tools/fake-docker (no container engine on these nodes): a
  stand-in with docker's signal semantics, the container's first process PID 1
  of its own PID namespace (`unshare --pid --fork`) and outside the job's
  cgroup, as containerd-shim keeps it. The control test shows why that matters:
  without --init, SIGTERM to the container's PID 1 is dropped. With the
  launcher, the container is gone however the job ends: exit, Ctrl-C to the
  launcher, `systemctl stop sparkguard-training.target`, SIGTERM to the trainer
  (what earlyoom sends), SIGKILL to the docker client.
"""

from __future__ import annotations

import json
import time

import pytest

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.replay import REPO
from tests.sandbox.conftest import wait_for

NODE = "node-1"
TARGET = "sparkguard-training.target"
# The trainer inside the container: installs no SIGTERM handler (like a python trainer), and
# says where it runs. `sleep` in a loop keeps SIGTERM's default action (exit by signal).
TRAINER = "sh -c 'echo $$ > /run/sg-ctr-trainer.pid; while :; do sleep 0.2; done'"


@pytest.fixture(scope="module")
def node(sandbox_nodes):
    result = run_deploy(load_inventory(sandbox_nodes.inventory_dir), site_deploy)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    target = f"{sandbox_nodes.node(NODE).rootfs}/usr/local/bin/docker"
    with open(target, "w") as handle:
        handle.write((REPO / "tools" / "fake-docker").read_text())
    import os

    os.chmod(target, 0o755)
    yield sandbox_nodes
    sandbox_nodes.ssh(NODE, "rm -f /usr/local/bin/docker /run/sg-ctr-trainer.pid; rm -rf /run/fake-docker; "
                            "systemctl stop 'fake-docker-*' 2>/dev/null; true")


def sh(handle, command: str, user: str = "root") -> str:
    rc, out, err = handle.ssh(NODE, command, user=user)
    assert rc == 0, (command, out, err)
    return out.strip()


def last_run(handle) -> dict:
    return json.loads(sh(handle, "cat /var/lib/sparkguard/train/last.json"))


# --- sudo from an ops account -------------------------------------------------------------


def test_sudo_from_ops_runs_the_job_as_ops_and_leaves_training_mode(node):
    assert sh(node, "id -un", user="ops") == "ops"
    rc, out, err = node.ssh(NODE, "cd ~ && sudo sparkguard-train --name opsjob -- sh -c "
                                  "'id -un; echo $HOME; cat /proc/self/oom_score_adj; "
                                  f"systemctl is-active {TARGET}; exit 7'", user="ops")
    assert rc == 7, (out, err)
    assert out.split("\n")[:4] == ["ops", "/home/ops", "1000", "active"], out
    # Left as root by the job's ExecStopPost (+): the target is down and the outcome recorded.
    assert sh(node, f"systemctl is-active {TARGET} || true") == "inactive"
    status = json.loads(sh(node, "sparkguard-train --status --json", user="ops"))   # readable without sudo
    assert status["training_mode"] is False and status["jobs"] == []
    assert status["last_run"]["unit"].startswith("sparkguard-job-opsjob-")
    assert status["last_run"]["exit_code"] == 7 and status["last_run"]["killed_by_earlyoom"] is False
    assert status["last_run"]["main_pid"].isdigit() and status["last_run"]["started"][:3].isalpha()
    assert sh(node, "stat -c '%U %a' /var/lib/sparkguard/train/last.json") == "root 644"


def test_sudo_job_stopped_by_signal_still_leaves_training_mode(node):
    rc, _, err = node.ssh(NODE, "sudo sparkguard-train --name opskill -- sh -c 'kill -9 $$'", user="ops")
    assert rc == 137, err
    assert sh(node, f"systemctl is-active {TARGET} || true") == "inactive"
    assert last_run(node)["exit_code"] == 137


# --- docker: the container is the job's ----------------------------------------------------


def container_gone(handle) -> bool:
    """No fake container state, no shim service, no trainer process left on the node."""
    out = sh(handle, "ls /run/fake-docker 2>/dev/null | wc -l; "
                     "systemctl list-units --plain --no-legend 'fake-docker-*' | wc -l; "
                     "pid=$(cat /run/sg-ctr-trainer.pid 2>/dev/null); "
                     "if [ -n \"$pid\" ] && kill -0 \"$pid\" 2>/dev/null; then echo alive; else echo gone; fi")
    return out.split() == ["0", "0", "gone"]


def host_trainer_pid(handle, container: str) -> str:
    """The trainer's PID as the node sees it: the first child of the container's init."""
    init = sh(handle, f"cat /run/fake-docker/{container}/pid")
    return sh(handle, f"cat /proc/{init}/task/{init}/children").split()[0]


def test_without_init_the_containers_pid1_ignores_sigterm(node):
    """The stand-in's fidelity: a trainer that is PID 1 of its namespace drops SIGTERM, SIGKILL lands."""
    sh(node, "rm -f /run/sg-ctr-trainer.pid; docker run -d --name sg-control img " + TRAINER)
    wait_for(lambda: sh(node, "cat /run/fake-docker/sg-control/pid 2>/dev/null || true"), what="the container")
    pid1 = sh(node, "cat /run/fake-docker/sg-control/pid")
    sh(node, f"kill -TERM {pid1}")
    time.sleep(1.5)
    assert sh(node, "docker inspect -f '{{.State.Running}}' sg-control") == "true"
    sh(node, "docker rm -f sg-control")
    assert container_gone(node)


# ending -> (the job's exit code, the container's, whether the job's own stop ended the container)
ENDINGS = {
    "exit": (3, 3, False),
    "ctrl-c": (143, 143, True),
    "stop-target": (143, 143, True),
    "sigterm-trainer": (143, 143, False),     # what earlyoom sends at the SIGTERM line
    "sigkill-trainer": (137, 137, False),     # earlyoom at the SIGKILL line, or the kernel
    "sigkill-client": (137, 143, True),       # the docker client dies; systemd's ExecStop still stops the container
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_docker_job_owns_its_container_however_it_ends(node, ending):
    job_exit, container_exit, stopped_by_job = ENDINGS[ending]
    sh(node, "rm -f /run/sg-ctr-trainer.pid /tmp/sg-launcher.rc /run/sg-ctr-go")
    # The exiting trainer waits for the test's word: a fixed sleep ended before a loaded machine had read its
    # init's adj (the process was gone, and its launcher's late rc then failed the next ending too).
    command = ("sh -c 'echo $$ > /run/sg-ctr-trainer.pid; until [ -e /run/sg-ctr-go ]; do sleep 0.1; done; exit 3'"
               if ending == "exit" else TRAINER)
    sh(node, "cat > /tmp/sg-launch.sh <<'EOF'\n"
             f"sparkguard-train --name ctr --docker -- docker run --rm --gpus all img {command}\n"
             "echo $? > /tmp/sg-launcher.rc\nEOF\n(setsid sh /tmp/sg-launch.sh > /tmp/sg-launcher.log 2>&1 &)")
    wait_for(lambda: sh(node, "ls /run/fake-docker/ 2>/dev/null | head -1"), what="the container")
    container = sh(node, "ls /run/fake-docker/")
    assert container.startswith("sparkguard-job-ctr-")
    wait_for(lambda: sh(node, "cat /run/sg-ctr-trainer.pid 2>/dev/null || true"), what="the trainer")
    # What the launcher injected reached docker: an init in front of the trainer, adj 1000 on both.
    init = sh(node, f"cat /run/fake-docker/{container}/pid")
    assert sh(node, f"cat /proc/{init}/oom_score_adj") == "1000"
    if ending != "exit":
        assert sh(node, "cat /run/sg-ctr-trainer.pid") != "1", "--init puts an init in front of the trainer"
        assert sh(node, f"cat /proc/{host_trainer_pid(node, container)}/oom_score_adj") == "1000"
    unit = container + ".service"
    if ending == "exit":
        sh(node, "touch /run/sg-ctr-go")
    elif ending == "ctrl-c":
        sh(node, "kill -INT $(pgrep -f '[s]parkguard-train --name ctr')")
    elif ending == "stop-target":
        sh(node, f"systemctl stop {TARGET}")
    elif ending == "sigterm-trainer":
        sh(node, f"kill -TERM {host_trainer_pid(node, container)}")
    elif ending == "sigkill-trainer":
        sh(node, f"kill -KILL {host_trainer_pid(node, container)}")
    elif ending == "sigkill-client":
        sh(node, f"systemctl kill -s KILL --kill-whom=main {unit}")
    rc = wait_for(lambda: sh(node, "cat /tmp/sg-launcher.rc 2>/dev/null || true"), timeout=60,
                  what="the launcher's end")
    wait_for(lambda: container_gone(node), timeout=30, what="the container's removal")
    assert sh(node, f"systemctl is-active {TARGET} || true") == "inactive"
    record = last_run(node)
    assert record["unit"] == unit
    assert record["container"] == container and record["container_removed"] is True
    assert (record["exit_code"], record["container_exit_code"], record["container_stopped_by_job"]) == (
        job_exit, container_exit, stopped_by_job), record
    assert record["killed_by_earlyoom"] is False    # no earlyoom line: the replay matrix covers a real one
    assert int(rc) == job_exit
