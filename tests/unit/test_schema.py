"""Every error path of the schema: clear paragraph, exit 2, no traceback, no SSH."""

from __future__ import annotations

import pytest

from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from tests.conftest import run_cli

GOOD = """
all:
  vars:
    node: {memory_total_gib: 121.7}
  hosts:
    spark-01:
      ssh_host: 192.0.2.11
"""


def problems_of(path) -> list:
    with pytest.raises(ConfigError) as caught:
        load_inventory(path)
    return caught.value.problems


def test_valid_inventory_loads(inventory_dir):
    inventory = load_inventory(inventory_dir(GOOD))
    assert [h.name for h in inventory.hosts] == ["spark-01"]
    assert inventory.hosts[0].config.ssh_port == 22


def test_unknown_key_is_a_typo_with_suggestion(inventory_dir):
    path = inventory_dir(GOOD.replace("node: {memory_total_gib: 121.7}", "node: {memory_totl_gib: 121.7}"))
    [problem] = problems_of(path)
    assert problem.host == "spark-01"
    assert problem.field == "node.memory_totl_gib"
    assert problem.value == 121.7
    assert "did you mean 'memory_total_gib'" in problem.allowed
    assert "hosts.yml" in problem.source and "group all" in problem.source


def test_unknown_top_level_role_block(inventory_dir):
    [problem] = problems_of(inventory_dir(GOOD + "      earlyom: {enabled: false}\n"))
    assert problem.field == "earlyom"
    assert "allowed here" in problem.allowed


def test_wrong_type(inventory_dir):
    [problem] = problems_of(inventory_dir(GOOD + "      sudo: perhaps\n"))
    assert (problem.field, problem.value) == ("sudo", "perhaps")
    assert "boolean" in problem.allowed
    assert "(host spark-01)" in problem.source


def test_out_of_range(inventory_dir):
    [problem] = problems_of(inventory_dir(GOOD + "      ssh_port: 70000\n"))
    assert (problem.field, problem.value) == ("ssh_port", 70000)
    assert "65535" in problem.allowed


def test_a_host_without_an_address_is_reached_by_its_name_which_must_be_one(inventory_dir):
    """As Ansible: no ssh_host (ansible_host) means the host's name is the address; a name that cannot be one
    is refused on ssh_host, saying where the value came from."""
    inventory = load_inventory(inventory_dir(GOOD.replace("      ssh_host: 192.0.2.11\n", "      sudo: true\n")))
    assert inventory.hosts[0].config.ssh_host == "spark-01"
    text = GOOD.replace("spark-01:\n      ssh_host: 192.0.2.11\n", "spark_01:\n      sudo: true\n")
    [problem] = problems_of(inventory_dir(text))
    assert problem.field == "ssh_host" and problem.value == "spark_01", problem
    assert "the host's name" in problem.source


def test_unknown_group_key(inventory_dir):
    problems = problems_of(inventory_dir(GOOD.replace("  hosts:", "  hostz:")))
    assert any("did you mean 'hosts'" in p.allowed for p in problems)


def test_yaml_syntax_error_names_line(inventory_dir):
    [problem] = problems_of(inventory_dir("all:\n  hosts:\n    a: [unclosed\n"))
    assert "not valid YAML at line" in problem.allowed


def test_every_problem_is_reported_not_just_the_first(inventory_dir):
    text = GOOD + "      ssh_port: 0\n      sudo: perhaps\n"
    assert {p.field for p in problems_of(inventory_dir(text))} == {"ssh_port", "sudo"}


def test_cli_validate_exit_2_paragraph_no_traceback(inventory_dir):
    path = inventory_dir(GOOD + "      ssh_port: 70000\n")
    result = run_cli("validate", str(path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "host 'spark-01', field 'ssh_port' = 70000" in result.stderr
    assert "nothing was touched on any node" not in result.stderr   # validate never touches one: no claim to make


def test_cli_validate_ok(inventory_dir):
    result = run_cli("validate", str(inventory_dir(GOOD)))
    assert result.returncode == 0, result.stderr
    assert "1 host(s) valid" in result.stdout


def test_missing_inventory_path(tmp_path):
    result = run_cli("validate", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "no inventory found" in result.stderr


def test_duplicate_keys_are_an_error_not_silently_dropped(inventory_dir):
    text = GOOD.replace("    node: {memory_total_gib: 121.7}\n",
                        "    node: {memory_total_gib: 121.7}\n    base: {contact: a}\n    base: {contact: b}\n")
    [problem] = problems_of(inventory_dir(text))
    assert "duplicate key 'base'" in problem.allowed and "line" in problem.allowed


def test_a_typo_inside_a_named_model_is_suggested_like_any_other(inventory_dir):
    """vllm.models.<name> is a mapping of named entries: a typo in one gets the entry's own fields, not []."""
    path = inventory_dir(GOOD.replace("ssh_host: 192.0.2.11", "ssh_host: 192.0.2.11\n      vllm:\n        models:\n"
                                      "          chat: {model: meta-llama/Llama-3.1-8B-Instruct, weigths_gib: 16}"))
    [problem] = [p for p in problems_of(path) if p.field.endswith("weigths_gib")]
    assert problem.field == "vllm.models.chat.weigths_gib"
    assert "did you mean 'weights_gib'" in problem.allowed
    assert "allowed here: " in problem.allowed and "max_model_len" in problem.allowed.split("allowed here: ")[1]


def test_the_settings_reference_documents_each_field_of_a_named_model():
    from sparkguard.docs import settings_reference

    text = settings_reference()
    assert "| `vllm.models` | mapping of str to ServedModel |" in text
    for field in ("model", "weights_gib", "kv_cache_gib", "max_model_len", "port", "options"):
        assert f"| `vllm.models.<name>.{field}` |" in text, field
