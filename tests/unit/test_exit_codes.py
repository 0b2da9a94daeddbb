"""One exit code per meaning in every command, one JSON document on stdout for every --json, and refusals
that end with what the command itself would have touched (README, "Exit codes")."""

from __future__ import annotations

import json
import socket

import pytest

from sparkguard.errors import (
    EXIT_CONFIG_ERROR,
    EXIT_DOES_NOT_FIT,
    EXIT_UNREACHABLE,
)
from tests.conftest import REPO, run_cli
from tests.unit.test_schema import GOOD

INCIDENT = REPO / "tests" / "fixtures" / "incident-inventory"   # valid, and over-committed while training


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): a connection to it is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def document(result) -> dict:
    """stdout as the one JSON document it must be."""
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", [["validate", str(INCIDENT)], ["plan", str(INCIDENT)],
                                     ["apply", str(INCIDENT)], ["render", str(INCIDENT), "--out", "/tmp/sg-never"]])
def test_a_valid_inventory_that_does_not_fit_exits_3_not_2(command):
    result = run_cli(*command)
    assert result.returncode == EXIT_DOES_NOT_FIT, (command, result.stderr)
    assert "Traceback" not in result.stderr


def test_an_invalid_inventory_exits_2_even_when_it_also_does_not_fit(inventory_dir, tmp_path):
    hosts = (INCIDENT / "hosts.yml").read_text().replace("ssh_host:", "ssh_port: 70000\n      ssh_host:", 1)
    path = inventory_dir(hosts)
    result = run_cli("validate", str(path))
    assert result.returncode == EXIT_CONFIG_ERROR, result.stderr
    assert "field 'ssh_port' = 70000" in result.stderr


def test_plan_json_of_a_host_that_does_not_fit_shows_the_numbers_and_exits_3():
    result = run_cli("plan", str(INCIDENT), "--json")
    assert result.returncode == EXIT_DOES_NOT_FIT
    assert [h["fits"] for h in document(result)["hosts"]] == [False]


def test_apply_json_of_an_invalid_inventory_is_a_json_document_naming_each_problem(inventory_dir):
    path = inventory_dir(GOOD.replace("ssh_host: 192.0.2.11", "ssh_host: 192.0.2.11\n      ssh_port: 70000\n"
                                      "      vllm: {hf_token: hunter2-secret, enabledd: true}"))
    result = run_cli("apply", str(path), "--json")
    assert result.returncode == EXIT_CONFIG_ERROR
    out = document(result)
    assert out["ok"] is False and out["error"] == "invalid-input" and out["exit_code"] == 2
    assert out["command"] == "apply"
    by_field = {p["field"]: p for p in out["problems"]}
    assert by_field["ssh_port"]["host"] == "spark-01" and by_field["ssh_port"]["value"] == 70000
    assert by_field["ssh_port"]["kind"] == "input" and "65535" in by_field["ssh_port"]["allowed"]
    assert "hunter2-secret" not in result.stdout + result.stderr      # a secret never reaches stdout either


def test_apply_json_when_a_node_does_not_answer_says_which_and_exits_4(inventory_dir):
    path = inventory_dir(GOOD.replace("ssh_host: 192.0.2.11", f"ssh_host: 127.0.0.1\n      ssh_port: {closed_port()}"))
    result = run_cli("apply", str(path), "--json", timeout=120)
    assert result.returncode == EXIT_UNREACHABLE, result.stderr
    out = document(result)
    assert out["ok"] is False and out["error"] == "unreachable" and out["unreachable"] == ["spark-01"]
    assert any("spark-01" in paragraph for paragraph in out["message"])


def test_a_usage_error_under_json_still_prints_a_document():
    result = run_cli("plan", "--json")            # the inventory argument is missing
    assert result.returncode == EXIT_CONFIG_ERROR
    out = document(result)
    assert out["error"] == "usage" and "inventory" in out["message"][0]


@pytest.mark.parametrize("budget_gib, code, fits", [(200, 0, True), (8, EXIT_DOES_NOT_FIT, False)])
def test_estimate_with_a_budget_exits_3_when_the_job_as_asked_does_not_fit(budget_gib, code, fits):
    args = ["estimate", "--model", "gemma-4-26B-A4B", "--seq-len", "16000", "--budget-gib", str(budget_gib)]
    assert run_cli(*args).returncode == code
    result = run_cli(*args, "--json")
    assert result.returncode == code and document(result)["budget"]["fits"] is fits
    assert run_cli("estimate", "--model", "gemma-4-26B-A4B").returncode == 0     # no budget, no verdict


@pytest.mark.parametrize("command, ending", [
    (["apply"], "nothing was touched on any node"),
    (["audit"], "no node was contacted"),
    (["render", "--out", "/tmp/sg-never"], "nothing was written"),
    (["validate"], None),
    (["plan"], None),
])
def test_a_refusal_ends_with_what_that_command_spared(inventory_dir, command, ending):
    path = inventory_dir(GOOD + "      ssh_port: 70000\n")
    result = run_cli(command[0], str(path), *command[1:])
    assert result.returncode == EXIT_CONFIG_ERROR
    for claim in ("nothing was touched on any node", "no node was contacted", "nothing was written"):
        assert (claim in result.stderr) == (claim == ending), (command, result.stderr)
