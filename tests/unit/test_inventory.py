"""Precedence host > group > all > role defaults, Ansible-style layout."""

from __future__ import annotations

from sparkguard.inventory.loader import load_inventory
from sparkguard.pyinfra_inventory import groups_for

LAYERED = """
all:
  vars:
    ssh_user: ops
    ssh_port: 2200
    base: {contact: all-level}
    node: {memory_total_gib: 100}
  children:
    gpu:
      vars:
        ssh_port: 2201
        node: {device_profile: dgx-spark}
      children:
        spark:
          vars:
            ssh_port: 2202
          hosts:
            s1: {ssh_host: 10.9.0.1, base: {contact: host-level}}
            s2: {ssh_host: 10.9.0.2}
    plain:
      hosts:
        p1: {ssh_host: 10.9.0.3, ssh_key: keys/id}
"""


def test_precedence_host_over_group_over_all_over_defaults(inventory_dir):
    inventory = load_inventory(inventory_dir(LAYERED))
    s1, s2, p1 = (inventory.host(n).config for n in ("s1", "s2", "p1"))
    assert s1.base.contact == "host-level"          # host beats all
    assert s2.base.contact == "all-level"           # all applies
    assert s1.ssh_port == 2202 and p1.ssh_port == 2200  # child group beats parent group beats all
    assert s1.ssh_user == "ops"                     # all
    assert p1.sudo is False                         # role/connection default
    assert s1.base.enabled is True                  # role default


def test_mappings_merge_key_by_key(inventory_dir):
    inventory = load_inventory(inventory_dir(LAYERED))
    node = inventory.host("s1").config.node
    assert node.memory_total_gib == 100 and node.device_profile == "dgx-spark"
    assert inventory.host("p1").config.node.device_profile == "auto"


def test_group_vars_and_host_vars_files_override_inline(inventory_dir):
    path = inventory_dir(LAYERED)
    (path / "group_vars").mkdir()
    (path / "group_vars" / "spark.yml").write_text("ssh_port: 2300\n")
    (path / "host_vars").mkdir()
    (path / "host_vars" / "s2.yml").write_text("base: {contact: from-host-file}\n")
    inventory = load_inventory(path)
    assert inventory.host("s1").config.ssh_port == 2300
    assert inventory.host("s2").config.base.contact == "from-host-file"


def test_relative_key_paths_resolve_against_inventory(inventory_dir):
    path = inventory_dir(LAYERED)
    assert inventory_dir and load_inventory(path).host("p1").config.ssh_key == str((path / "keys/id").resolve())


def test_groups_and_membership(inventory_dir):
    inventory = load_inventory(inventory_dir(LAYERED))
    assert inventory.groups["gpu"] == ["s1", "s2"]
    assert inventory.host("s1").groups == ("all", "gpu", "spark")


def test_pyinfra_adapter_groups(inventory_dir):
    path = inventory_dir(LAYERED)
    groups = groups_for(str(path / "inventory.py"))
    hosts, _ = groups["all"]
    data = dict(hosts)
    assert data["s1"]["ssh_hostname"] == "10.9.0.1"
    assert data["s1"]["ssh_port"] == 2202
    assert data["s1"]["sparkguard"]["base"]["contact"] == "host-level"
    assert groups["spark"] == ["s1", "s2"]


def test_pyinfra_adapter_exits_2_on_bad_inventory(inventory_dir, capsys):
    import pytest

    path = inventory_dir(LAYERED.replace("ssh_port: 2202", "ssh_port: many"))
    with pytest.raises(SystemExit) as caught:
        groups_for(str(path / "inventory.py"))
    assert caught.value.code == 2
    assert "field 'ssh_port' = 'many'" in capsys.readouterr().err


def test_a_role_whose_required_role_is_disabled_is_refused(inventory_dir):
    from tests.conftest import run_cli

    text = ("all:\n  vars:\n    node: {memory_total_gib: 121.7}\n    base: {enabled: false}\n{extra}"
            "  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    refused = run_cli("validate", str(inventory_dir(text.replace("{extra}", ""))))
    assert refused.returncode == 2
    assert "host 'h', field 'base.enabled' = False: role swap needs role base" in refused.stderr
    assert "host 'h', field 'base.enabled' = False: role recovery needs role base (it validates its sysctl" in refused.stderr
    alone = run_cli("validate", str(inventory_dir(text.replace(
        "{extra}", "    swap: {enabled: false}\n    recovery: {enabled: false}\n"))))
    assert alone.returncode == 0, alone.stderr


def test_serving_that_follows_training_needs_the_target_role_base_installs(inventory_dir):
    from tests.conftest import run_cli

    text = ("all:\n  vars:\n    node: {memory_total_gib: 121.7, device_profile: dgx-spark}\n"
            "    base: {enabled: false}\n    swap: {enabled: false}\n    recovery: {enabled: false}\n"
            "    vllm: {runtime: native, during_training: POLICY, models: {a: {model: m/x, shape: Llama-3.1-8B,"
            " max_model_len: 4096, max_num_seqs: 2}}}\n  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    refused = run_cli("validate", str(inventory_dir(text.replace("POLICY", "stop"))))
    assert refused.returncode == 2 and "field 'base.enabled' = False: vllm.during_training: stop" in refused.stderr
    kept = run_cli("validate", str(inventory_dir(text.replace("POLICY", "keep"))))
    assert kept.returncode == 0, kept.stderr


def test_validate_says_when_render_would_refuse_for_want_of_memtotal(inventory_dir):
    """Valid for apply (MemTotal is read from the node), but render and plan are offline: validate says so."""
    from tests.conftest import run_cli

    path = inventory_dir("all:\n  hosts:\n    s1: {ssh_host: 192.0.2.1}\n")
    done = run_cli("validate", str(path))
    assert done.returncode == 0 and "note: node.memory_total_gib is not declared for s1" in done.stderr
    declared = inventory_dir("all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n    s1: {ssh_host: 192.0.2.1}\n")
    assert "memory_total_gib" not in run_cli("validate", str(declared)).stderr
