"""Role vllm's absent state: instances the inventory no longer lists and files it no longer asks for must go.

As data (AbsentInstances, AbsentFiles), converged by pyinfra's own present=False operations and
checked by audit. Here: what the role declares for each inventory, and what that removes from a
node's listing (the same rule converge and audit apply). The real removal runs on a sandbox node
in tests/sandbox/test_vllm.py::test_removed_instances_and_policies_leave_nothing_behind.
"""

from __future__ import annotations

import pytest

from sparkguard.audit.judge import _left_behind
from sparkguard.engine.probe import absent_files_key, absent_units_key
from sparkguard.engine.render import host_states
from sparkguard.inventory.loader import load_inventory

BASE = """
all:
  vars:
    node: {{memory_total_gib: 121.7, device_profile: dgx-spark}}
    vllm:
      runtime: native
      during_training: {policy}
      models: {models}
  hosts:
    h: {{ssh_host: 192.0.2.1}}
"""
MODEL = "{model: meta-llama/Llama-3.1-8B-Instruct, shape: Llama-3.1-8B, max_model_len: 4096, max_num_seqs: 2}"
ON_NODE = {
    "files": ["/etc/sparkguard/vllm/alpha.yaml", "/etc/sparkguard/vllm/alpha.env",
              "/etc/sparkguard/vllm/beta.yaml", "/etc/sparkguard/vllm/beta.env",
              "/etc/systemd/system/sparkguard-training.target.d/50-sparkguard-vllm-beta.conf",
              "/usr/local/lib/sparkguard/vllm-mode", "/etc/systemd/system/sparkguard-vllm-training@.service"],
    "units": ["sparkguard-vllm@alpha.service", "sparkguard-vllm@beta.service"],
}


def vllm_state(inventory_dir, policy: str, names: list[str]):
    models = "{" + ", ".join(f"{n}: {MODEL[:-1]}, port: {8000 + i}}}" for i, n in enumerate(names)) + "}"
    inventory = load_inventory(inventory_dir(BASE.format(policy=policy, models=models)))
    return next(s for s in host_states(inventory.host("h")) if s.role == "vllm")


def removed(state) -> list[str]:
    files = " ".join(ON_NODE["files"])
    units = " ".join(ON_NODE["units"])
    runtime = {absent_files_key(state, 0): files, absent_units_key(state, 0): units}
    return sorted(_left_behind(state, runtime))


@pytest.mark.parametrize("policy,names,expected", [
    # beta deleted from vllm.models: its server, config, env and drop-in go; alpha's stay.
    ("stop", ["alpha"], ["/etc/sparkguard/vllm/beta.env", "/etc/sparkguard/vllm/beta.yaml",
                         "/etc/systemd/system/sparkguard-training.target.d/50-sparkguard-vllm-beta.conf",
                         "sparkguard-vllm@beta.service"]),
    # Policy keep: nothing may stop serving during training any more (mode script, training template go too).
    ("keep", ["alpha", "beta"], ["/etc/systemd/system/sparkguard-training.target.d/50-sparkguard-vllm-beta.conf",
                                 "/etc/systemd/system/sparkguard-vllm-training@.service",
                                 "/usr/local/lib/sparkguard/vllm-mode"]),
    # Nothing changed: nothing to remove.
    ("stop", ["alpha", "beta"], []),
])
def test_what_a_changed_inventory_removes(inventory_dir, policy, names, expected):
    assert removed(vllm_state(inventory_dir, policy, names)) == expected


def test_role_without_models_only_sweeps(inventory_dir):
    """No model listed: nothing is installed, but what an earlier inventory installed is still swept."""
    state = vllm_state(inventory_dir, "stop", [])
    assert state.files == () and state.services == () and state.directories == ()
    assert removed(state) == sorted(ON_NODE["files"] + ON_NODE["units"])


def test_only_sparkguards_own_paths_are_named(inventory_dir):
    state = vllm_state(inventory_dir, "stop", [])
    globs = [g for a in state.absent_files for g in a.globs]
    assert all(g.startswith(("/etc/sparkguard/vllm/", "/etc/systemd/system/sparkguard-", "/usr/local/lib/sparkguard/",
                             "/usr/local/lib/systemd/system/sparkguard-")) for g in globs), globs
    assert [a.template for a in state.absent_instances] == ["sparkguard-vllm@{}.service"]
