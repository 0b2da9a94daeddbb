"""render --format ansible against a fresh node: ansible-playbook converges it, audit is green, a second run changes
nothing (own bookworm node, 127.0.84.x, torn down after the module).

The node starts without python3 (Ansible's modules need it; the play's first task installs it) and with what
the desired state says must go: a stray vLLM config and a running instance of a model no longer in the
inventory. After the two runs, sparkguard apply itself finds nothing to change: both reached the same node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.conftest import run_cli
from tests.reporting import report
from tests.sandbox.conftest import booted_sandbox, net

pytestmark = pytest.mark.sandbox
NET = net("127.0.84")
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
LEFTOVERS = (
    "DEBIAN_FRONTEND=noninteractive apt-get -y -qq purge python3-minimal python3.11-minimal >/dev/null 2>&1; "
    "mkdir -p /etc/sparkguard/vllm && echo stale > /etc/sparkguard/vllm/dropped.yaml && "
    "printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > /etc/systemd/system/sparkguard-vllm@.service && "
    "systemctl daemon-reload && systemctl start sparkguard-vllm@dropped.service && ! command -v python3"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 1) as handle:
        yield handle


def ansible_playbook(out: Path) -> tuple[subprocess.CompletedProcess, float, dict[str, int]]:
    """One run as a team would start it (its ansible.cfg: forks = 1 here, pipelining); the PLAY RECAP's counts."""
    began = time.monotonic()
    done = subprocess.run([str(PLAYBOOK), "-i", str(out / "inventory.yml"), str(out / "site.yml")], cwd=out,
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "ANSIBLE_CONFIG": str(out / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
    seconds = time.monotonic() - began
    recap = done.stdout.split("PLAY RECAP")[-1]
    (line,) = [row for row in recap.splitlines() if row.startswith("node-1 ")]
    return done, seconds, {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}


def test_the_export_converges_a_fresh_node_audit_is_green_and_a_second_run_changes_nothing(node, tmp_path):
    rc, out_text, err = node.ssh("node-1", LEFTOVERS)
    assert rc == 0, out_text + err
    out = tmp_path / "ansible"
    exported = run_cli("render", str(node.inventory_dir), "--format", "ansible", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert re.search(r"^forks = 1$", (out / "ansible.cfg").read_text(), re.M)

    first, first_s, first_recap = ansible_playbook(out)
    assert first.returncode == 0 and first_recap["failed"] == first_recap["unreachable"] == 0, first.stdout[-6000:]
    assert first_recap["changed"] > 0
    python_task = first.stdout.split("TASK [Python3 for Ansible's modules")[1].split("TASK [")[0]
    assert "changed: [node-1]" in python_task  # it was absent: installed, and said so

    audit = run_cli("audit", str(node.inventory_dir), "--json")
    report_ = json.loads(audit.stdout)
    failing = [(c["name"], c["actual"]) for h in report_["hosts"] for c in h["checks"] if not c["ok"]]
    assert audit.returncode == 0 and failing == [], failing
    rc, left, _ = node.ssh("node-1", "ls -A /etc/sparkguard/vllm; systemctl is-active sparkguard-vllm@dropped.service")
    assert left.split() == ["inactive"]

    second, second_s, second_recap = ansible_playbook(out)
    assert second.returncode == 0, second.stdout[-6000:]
    assert second_recap["changed"] == 0 and second_recap["failed"] == 0, second.stdout[-6000:]

    again = run_deploy(load_inventory(node.inventory_dir), site_deploy)
    assert again.ok and again.changed == 0, again.hosts[0].changed_names

    lines = [f"ansible export, first run (fresh node, python3 installed): {first_s:.1f} s; "
             f"PLAY RECAP {' '.join(f'{k}={v}' for k, v in first_recap.items())}",
             f"ansible export, second run: {second_s:.1f} s; "
             f"PLAY RECAP {' '.join(f'{k}={v}' for k, v in second_recap.items())}"]
    print("\n".join(lines))
    report(*lines)
