"""monitoring.alertmanager.webhook_url_env / _file: the receiver's URL read on the operator's machine, so the
inventory under review holds no credential (inventory/example does this). One source at a time; apply's
preflight refuses an unset or bad one without repeating it; alertmanager.yml holds it as a JSON string."""

from __future__ import annotations

import json

import pytest
import yaml

from sparkguard.engine.render import host_states
from sparkguard.errors import ConfigError
from sparkguard.facts import NodeInfo
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.monitoring.checks import preflight

NODE = "  vars:\n    node: {memory_total_gib: 121.7, device_profile: cpu-only}\n"
INFO = NodeInfo(memory_total_bytes=int(121.7 * 2**30), arch="aarch64")
URL = "https://hooks.example/services/T0/B1/s3cr3t?a=1&b=%22x%22"


def host(inventory_dir, alertmanager: str):
    path = inventory_dir(f"all:\n{NODE}    monitoring: {{enabled: true, alertmanager: {alertmanager}}}\n"
                         "  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    return load_inventory(path).host("h")


def alertmanager_yml(entry) -> str:
    return next(f.content for s in host_states(entry) for f in s.files if f.path == "/etc/prometheus/alertmanager.yml")


@pytest.mark.parametrize("alertmanager,field", [
    ("{webhook_url: 'https://a.example/x', webhook_url_env: SG_HOOK}", "monitoring.alertmanager.webhook_url_env"),
    ("{webhook_url_env: SG_HOOK, webhook_url_file: /etc/hook}", "monitoring.alertmanager.webhook_url_file"),
    ("{webhook_url_file: relative/hook}", "monitoring.alertmanager.webhook_url_file"),
])
def test_one_source_at_a_time_and_a_file_by_absolute_path(inventory_dir, alertmanager, field):
    with pytest.raises(ConfigError) as refused:
        host(inventory_dir, alertmanager)
    assert field in {p.field for p in refused.value.problems}, refused.value
    assert "https://a.example/x" not in str(refused.value)


def test_from_the_environment_it_lands_in_alertmanager_yml_as_a_json_string(inventory_dir, monkeypatch):
    monkeypatch.setenv("SG_HOOK", URL)
    entry = host(inventory_dir, "{webhook_url_env: SG_HOOK}")
    assert list(preflight(entry.config, INFO)) == []
    text = alertmanager_yml(entry)
    assert f"url: {json.dumps(URL)}\n" in text
    assert yaml.safe_load(text)["receivers"][0]["webhook_configs"][0]["url"] == URL


def test_from_a_file_its_line_is_the_url(inventory_dir, tmp_path):
    (tmp_path / "hook").write_text(URL + "\n")
    entry = host(inventory_dir, f"{{webhook_url_file: {tmp_path / 'hook'}}}")
    assert yaml.safe_load(alertmanager_yml(entry))["receivers"][0]["webhook_configs"][0]["url"] == URL


@pytest.mark.parametrize("value,why", [(None, "no webhook URL in the environment variable SG_HOOK"),
                                       ("ftp://hooks.example/x", "the URL in the environment variable SG_HOOK")])
def test_apply_refuses_an_unset_or_bad_one_without_repeating_it(inventory_dir, monkeypatch, value, why):
    if value is None:
        monkeypatch.delenv("SG_HOOK", raising=False)
    else:
        monkeypatch.setenv("SG_HOOK", value)
    entry = host(inventory_dir, "{webhook_url_env: SG_HOOK}")
    [problem] = list(preflight(entry.config, INFO))
    assert problem.field == "monitoring.alertmanager.webhook_url_env" and problem.value == "SG_HOOK"
    assert why in problem.allowed and "ftp://" not in problem.paragraph()
    # Render (offline, in CI) shows the routing with <secret> in the URL's place, whatever the environment holds.
    assert "https://secret.invalid/<secret>" in next(
        f.review for s in host_states(entry) for f in s.files if f.path == "/etc/prometheus/alertmanager.yml")
