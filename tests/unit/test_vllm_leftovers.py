"""Role vllm: the Ensure that stops removed instances and removes files the inventory no longer asks for.

The check and fix scripts run here under /bin/sh against a temporary tree, with a
fake `systemctl` (it logs its arguments and lists the instances the test says are
loaded). The real units are exercised on a sandbox node in tests/sandbox/test_vllm.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sparkguard.inventory import load_inventory
from sparkguard.render import host_states
from sparkguard.templating import render_template


def scripts(tmp_path: Path, keep: list[str], wanted: list[str]) -> tuple[str, str]:
    names = dict(keep=keep, wanted=[str(tmp_path / "etc" / w) for w in wanted], owned=[str(tmp_path / "mode-script")],
                 config_dir=tmp_path / "etc", mode_dir=tmp_path / "run", dropin_dir=tmp_path / "dropins")
    return (render_template("vllm/leftovers.sh.j2", fix=False, **names),
            render_template("vllm/leftovers.sh.j2", fix=True, **names))


@pytest.fixture
def node(tmp_path):
    for d in ("etc", "run", "dropins", "bin"):
        (tmp_path / d).mkdir()
    fake = tmp_path / "bin" / "systemctl"
    fake.write_text('#!/bin/sh\nif [ "$1" = list-units ]; then cat "$SG_LOADED"; exit 0; fi\n'
                    'echo "$*" >> "$SG_LOG"\n')
    fake.chmod(0o755)
    (tmp_path / "loaded").write_text("")
    return tmp_path


def run(node: Path, script: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{node / 'bin'}:{os.environ['PATH']}", SG_LOADED=str(node / "loaded"),
               SG_LOG=str(node / "log"))
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=30)


def loaded(node: Path, *instances: str) -> None:
    (node / "loaded").write_text("".join(f"sparkguard-vllm@{i}.service loaded active running x\n" for i in instances))


def test_a_removed_model_is_stopped_and_its_files_removed(node):
    for name in ("alpha.yaml", "alpha.env", "alpha.shared.yaml", "beta.yaml", "beta.env"):
        (node / "etc" / name).write_text("x")
    (node / "dropins" / "50-sparkguard-vllm-beta.conf").write_text("x")
    (node / "dropins" / "50-other.conf").write_text("not ours")
    (node / "run" / "beta.mode").write_text("x")
    (node / "mode-script").write_text("x")
    loaded(node, "alpha", "beta")
    check, fix = scripts(node, ["alpha"], ["alpha.yaml", "alpha.env"])

    assert run(node, check).returncode == 1
    assert not (node / "log").exists(), "the check changes nothing"
    result = run(node, fix)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (node / "etc").iterdir()) == ["alpha.env", "alpha.yaml"]
    assert sorted(p.name for p in (node / "dropins").iterdir()) == ["50-other.conf"]
    assert not (node / "run" / "beta.mode").exists() and not (node / "mode-script").exists()
    log = (node / "log").read_text().splitlines()
    assert "disable --now sparkguard-vllm@beta.service sparkguard-vllm-training@beta.service" in log
    assert not [line for line in log if "alpha" in line]
    assert log[-1] == "daemon-reload"
    assert "stopped vLLM instance beta" in result.stdout

    loaded(node, "alpha")
    assert run(node, check).returncode == 0


def test_nothing_to_remove_means_no_command_at_all(node):
    (node / "etc" / "alpha.yaml").write_text("x")
    loaded(node, "alpha")
    check, fix = scripts(node, ["alpha"], ["alpha.yaml"])
    assert run(node, check).returncode == 0
    assert run(node, fix).returncode == 0
    assert not (node / "log").exists()


def test_no_models_left_stops_every_instance(node):
    (node / "etc" / "alpha.yaml").write_text("x")
    loaded(node, "alpha")
    check, fix = scripts(node, [], [])
    assert run(node, check).returncode == 1
    run(node, fix)
    assert list((node / "etc").iterdir()) == []
    assert "disable --now sparkguard-vllm@alpha.service sparkguard-vllm-training@alpha.service" in (node / "log").read_text()


def test_role_without_models_only_sweeps(inventory_dir):
    """No model listed: nothing is installed, but what an earlier inventory installed is still swept."""
    text = "all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n    h: {ssh_host: 192.0.2.1}\n"
    states = {s.role: s for s in host_states(load_inventory(inventory_dir(text)).host("h"))}
    vllm = states["vllm"]
    assert vllm.files == () and vllm.services == () and vllm.directories == ()
    assert [e.description for e in vllm.ensures] == ["nothing left of removed vLLM instances or policies"]
    check = vllm.ensures[0].check
    assert 'kept() { case "  " in' in check and 'wanted() { case "  " in' in check, "nothing is kept"
