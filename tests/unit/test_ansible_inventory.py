"""Existing Ansible inventories work: the real `ansible-inventory --list` output (INI, YAML with ranges and
group_vars directories), the alias keys, and the YAML form read directly, all to the same settings.

ansible-core is a test dependency only (pyproject's `test` extra): sparkguard never imports it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from tests.conftest import in_ci, run_cli

INI = """
[spark]
spark-[01:03] ansible_user=ops ansible_become=true

[gh200]
gh-01 ansible_host=192.0.2.21 ansible_port=2222 ansible_ssh_private_key_file=keys/id_ed25519

[gpu:children]
spark
gh200
"""

YAML = """
all:
  children:
    gpu:
      children:
        spark:
          hosts:
            spark-[01:03]:
              ansible_user: ops
              ansible_become: true
        gh200:
          hosts:
            gh-01: {ansible_host: 192.0.2.21, ansible_port: 2222, ansible_ssh_private_key_file: keys/id_ed25519}
"""

# No mapping is set at two levels: Ansible replaces a mapping that a closer level sets again (its default
# hash_behaviour), where sparkguard merges key by key, so `--list` would differ from sparkguard's own read.
GROUP_VARS = {
    "group_vars/gpu/memory.yml": "node: {memory_total_gib: 121.7}\n",
    "group_vars/gpu/guard.yaml": "earlyoom: {term_percent: 9}\n",
    "group_vars/spark.yaml": "ssh_port: 2200\n",
    "host_vars/spark-02/earlyoom.yml": "earlyoom: {term_percent: 10, kill_percent: 3}\n",
}


def ansible_inventory() -> str:
    found = shutil.which("ansible-inventory") or str(Path(sys.executable).with_name("ansible-inventory"))
    if not Path(found).exists():
        if in_ci():
            pytest.fail("ansible-inventory is missing: the test extra (pip install -e .[test]) brings ansible-core")
        pytest.skip("ansible-core not installed (pip install -e .[test])")
    return found


def write(directory: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(text))
    return directory


def listed(source: Path, out_dir: Path, export: bool = False) -> Path:
    """`ansible-inventory -i SOURCE --list` saved as OUT_DIR/hosts.yml, as an operator's CI job would."""
    env = {**os.environ, "ANSIBLE_HOME": str(out_dir / ".ansible"), "ANSIBLE_LOCALHOST_WARNING": "False",
           "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False"}
    command = [ansible_inventory(), "-i", str(source), "--list", *(["--export"] if export else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "hosts.yml").write_text(done.stdout)
    json.loads(done.stdout)  # it is the real JSON, not something we wrote
    return out_dir


def summary(path: Path) -> dict[str, tuple]:
    inventory = load_inventory(path)
    return {h.name: (h.config.ssh_host, h.config.ssh_port, h.config.ssh_user, h.config.sudo,
                     Path(h.config.ssh_key).name if h.config.ssh_key else None, h.config.node.memory_total_gib,
                     h.config.node.device_profile, h.config.earlyoom.term_percent, h.config.earlyoom.kill_percent,
                     tuple(sorted(set(h.groups) - {"all", "ungrouped"})))
            for h in inventory.hosts}


EXPECTED = {
    "spark-01": ("spark-01", 2200, "ops", True, None, 121.7, "auto", 9, 4, ("gpu", "spark")),
    "spark-02": ("spark-02", 2200, "ops", True, None, 121.7, "auto", 10, 3, ("gpu", "spark")),
    "spark-03": ("spark-03", 2200, "ops", True, None, 121.7, "auto", 9, 4, ("gpu", "spark")),
    "gh-01": ("192.0.2.21", 2222, "root", False, "id_ed25519", 121.7, "auto", 9, 4, ("gh200", "gpu")),
}


@pytest.mark.parametrize("export", [False, True], ids=["list", "list --export"])
def test_ini_inventory_through_ansible_inventory_list(tmp_path, export):
    source = write(tmp_path / "ansible", {"hosts.ini": INI, **GROUP_VARS})
    # The saved JSON carries what ansible read from group_vars/host_vars; a host without ansible_host
    # is reached by its name, as in Ansible.
    assert summary(listed(source / "hosts.ini", tmp_path / "saved", export=export)) == EXPECTED


def test_yaml_inventory_with_ranges_and_group_vars_directories_reads_like_ansible(tmp_path):
    # sparkguard reads the directory itself (ranges, aliases, .yaml and group_vars/<g>/ files) or ansible's
    # JSON of it, to the same settings. In YAML sparkguard asks for every address: the ranged hosts get
    # theirs from host_vars/<host>/ directories.
    addresses = {f"host_vars/{n}/address.yml": f"ansible_host: {n}\n" for n in ("spark-01", "spark-02", "spark-03")}
    source = write(tmp_path / "ansible", {"hosts.yml": YAML, **GROUP_VARS, **addresses})
    assert summary(source) == EXPECTED
    assert summary(listed(source / "hosts.yml", tmp_path / "saved")) == EXPECTED


def test_alias_and_native_key_in_one_layer_must_agree(inventory_dir):
    path = inventory_dir("""
        all:
          vars:
            node: {memory_total_gib: 121.7}
          hosts:
            spark-01: {ansible_host: 192.0.2.11, ssh_host: 192.0.2.99}
    """)
    with pytest.raises(ConfigError, match=r"host 'spark-01', field 'ssh_host' = '192.0.2.99': sets ssh_host, as 'ansible_host'"):
        load_inventory(path)


@pytest.mark.parametrize(("key", "value"), [("ansible_ssh_common_args", "-o ProxyJump=bastion"),
                                            ("ansible_connection", "local"), ("ansible_become_user", "ops")])
def test_an_ansible_key_without_a_sparkguard_meaning_is_refused_by_name(inventory_dir, key, value):
    """A key that changes how the node is reached or who runs things there is never dropped silently."""
    path = inventory_dir(f"""
        all:
          vars:
            node: {{memory_total_gib: 121.7}}
            {key}: "{value}"
          hosts:
            spark-01: {{ansible_host: 192.0.2.11}}
    """)
    done = run_cli("validate", str(path))
    assert done.returncode == 2 and key in done.stderr and "unknown setting" in done.stderr


def test_keys_that_only_concern_ansibles_own_modules_are_accepted_and_named(inventory_dir):
    path = inventory_dir("""
        all:
          vars:
            node: {memory_total_gib: 121.7}
            ansible_python_interpreter: /usr/bin/python3
            ansible_connection: ssh
          hosts:
            spark-01: {ansible_host: 192.0.2.11, ansible_become_method: sudo}
            spark-02: {ansible_host: 192.0.2.12}
    """)
    done = run_cli("validate", str(path))
    assert done.returncode == 0, done.stderr
    assert "note: ansible_python_interpreter is ignored" in done.stderr and "spark-01, spark-02" in done.stderr
    assert "note: ansible_become_method is ignored" in done.stderr
    assert {h.name: h.config.ssh_host for h in load_inventory(path).hosts} == {"spark-01": "192.0.2.11",
                                                                               "spark-02": "192.0.2.12"}


def test_a_yaml_host_without_an_address_is_reached_by_its_name(inventory_dir):
    path = inventory_dir("""
        all:
          vars:
            node: {memory_total_gib: 121.7}
          children:
            spark:
              hosts:
                spark-01:
                spark-02: {ansible_host: 192.0.2.12}
    """)
    inventory = load_inventory(path)
    assert {h.name: h.config.ssh_host for h in inventory.hosts} == {"spark-01": "spark-01", "spark-02": "192.0.2.12"}
    assert "the host's name" in inventory.host("spark-01").sources["ssh_host"]


def test_an_ini_inventory_is_named_with_the_line_that_converts_it(tmp_path):
    (tmp_path / "hosts.yml").write_text(textwrap.dedent(INI))
    done = run_cli("validate", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "looks like an Ansible INI inventory" in done.stderr
    assert "ansible-inventory -i FILE --list > hosts.yml" in done.stderr


@pytest.mark.parametrize(("name", "why"), [
    ("node-[3:1]", "ends before it starts"),
    ("node-[1:2:0]", "step must be at least 1"),
    ("node-[aa:bb]", "is not a host range"),
])
def test_a_bad_range_is_exit_2(inventory_dir, name, why):
    path = inventory_dir(f"""
        all:
          vars:
            node: {{memory_total_gib: 121.7}}
          hosts:
            "{name}": {{ssh_host: 192.0.2.1}}
    """)
    done = run_cli("validate", str(path))
    assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr


# Groups are a graph by name, as in Ansible: a group named under two parents is in both, with every host it
# holds, and each group is read once whatever number of paths lead to it (issue 27: a 2.3 KB JSON of shared
# children was walked path by path, 2**30 of them).
SHARED = """
all:
  vars:
    node: {memory_total_gib: 121.7}
  children:
    gpu:
      hosts:
        s1: {ansible_host: 192.0.2.1}
    rack1:
      children:
        gpu:
          hosts:
            s2: {ansible_host: 192.0.2.2}
        edge:
          children:
            gpu: {}
    rack2:
      children:
        edge: {}
"""


def groups_of(path: Path) -> dict[str, set[str]]:
    return {h.name: set(h.groups) - {"all", "ungrouped"} for h in load_inventory(path).hosts}


def test_a_group_under_two_parents_is_one_group_in_both_as_ansible_reads_it(tmp_path):
    source = write(tmp_path / "ansible", {"hosts.yml": SHARED})
    expected = {"s1": {"gpu", "rack1", "edge", "rack2"}, "s2": {"gpu", "rack1", "edge", "rack2"}}
    assert groups_of(source) == expected
    assert groups_of(listed(source / "hosts.yml", tmp_path / "saved")) == expected


def test_shared_children_in_inventory_list_json_are_read_once_each(tmp_path):
    levels = 30  # 2**30 paths from `all` to the host: read as 60 groups
    document: dict = {"_meta": {"hostvars": {"s1": {"ansible_host": "192.0.2.1"}}}, "all": {"children": ["g0", "k0"]}}
    for level in range(levels):
        for prefix in "gk":
            document[f"{prefix}{level}"] = ({"children": [f"g{level + 1}", f"k{level + 1}"]} if level < levels - 1
                                            else {"hosts": ["s1"], "vars": {"node": {"memory_total_gib": 121.7}}})
    (tmp_path / "hosts.yml").write_text(json.dumps(document))
    inventory = load_inventory(tmp_path)
    assert set(inventory.host("s1").groups) == {"all"} | {f"{p}{n}" for p in "gk" for n in range(levels)}
    assert inventory.groups["g29"] == ["s1"] and inventory.host("s1").config.node.memory_total_gib == 121.7


@pytest.mark.parametrize(("document", "why"), [
    ({"all": {"children": ["a"]}, "a": {"children": ["b"]}, "b": {"children": ["a"]}, "_meta": {"hostvars": {}}},
     "is its own ancestor (all > a > b > a)"),
    ({"all": {"children": [f"g{n}" for n in range(1)]}, **{f"g{n}": {"children": [f"g{n + 1}"]} for n in range(40)},
      "_meta": {"hostvars": {}}}, "groups nest deeper than 32 levels (all > g0 > g1"),
])
def test_a_group_loop_or_chain_too_deep_names_its_groups(tmp_path, document, why):
    (tmp_path / "hosts.yml").write_text(json.dumps(document))
    with pytest.raises(ConfigError, match=re.escape(why)):
        load_inventory(tmp_path)


def test_a_range_is_counted_before_it_is_built(inventory_dir):
    path = inventory_dir("""
        all:
          hosts:
            "h[0:4095]x[0:4095]y[0:4095]": {ssh_host: 192.0.2.1}
    """)
    with pytest.raises(ConfigError, match=r"name 68719476736 hosts \(4096 x 4096 x 4096\), more than the 4096"):
        load_inventory(path)
