"""Bad monitoring settings fail validation with exit 2, before any SSH."""

from __future__ import annotations

import pytest

from sparkguard.roles.monitoring.addresses import split_host_port
from tests.conftest import run_cli

BASE = """
all:
  vars:
    node: {memory_total_gib: 121.7, device_profile: dgx-spark}
    monitoring: {enabled: true, alertmanager: {webhook_url: 'http://192.0.2.50:9000/hook'}}
    MONITORING
  hosts:
    spark-01: {ssh_host: 192.0.2.11}
"""


def inventory(extra: str) -> str:
    # The extra block deep-merges over the first monitoring block (a second key at the same level would be a
    # YAML duplicate), so it goes in through a group.
    return BASE.replace("    MONITORING\n", "").replace("  hosts:\n", "  children:\n    g:\n      vars:\n"
                                                           f"        monitoring: {extra}\n      hosts:\n"
                                                           "        spark-01: {ssh_host: 192.0.2.11}\n  hosts:\n")


@pytest.mark.parametrize("extra,field,value", [
    ("{cadvisor: {disable_metrics_extra: [network, netowrk]}}", "monitoring.cadvisor.disable_metrics_extra[1]",
     "'netowrk'"),
    ("{node_exporter: {listen_address: '192.0.2.11'}}", "monitoring.node_exporter.listen_address", "'192.0.2.11'"),
    ("{node_exporter: {listen_address: ':9100'}}", "monitoring.node_exporter.listen_address", "':9100'"),
    ("{prometheus: {listen_address: '192.0.2.11:99999'}}", "monitoring.prometheus.listen_address",
     "'192.0.2.11:99999'"),
    ("{prometheus: {listen_address: '300.1.2.3:9090'}}", "monitoring.prometheus.listen_address", "'300.1.2.3:9090'"),
    ("{prometheus: {vllm_targets: ['http://192.0.2.11:8000']}}", "monitoring.prometheus.vllm_targets[0]",
     "'http://192.0.2.11:8000'"),
    ("{prometheus: {retention_size: 10G}}", "monitoring.prometheus.retention_size", "'10G'"),
    ("{prometheus: {scrape_interval: '15'}}", "monitoring.prometheus.scrape_interval", "'15'"),
    ("{prometheus: {extra_rules: [{expr: up == 0}]}}", "monitoring.prometheus.extra_rules[0]", "{'expr'"),
    ("{alerts: {overrides: {term_percent: 20}}}", "monitoring.alerts.overrides.term_percent", "20"),
    ("{alerts: {overrides: {warn_procent: 20}}}", "monitoring.alerts.overrides.warn_procent", "20"),
    ("{alerts: {overrides: {warn_percent: 9}}}", "monitoring.alerts.overrides", "{'warn_percent': 9}"),
    ("{alertmanager: {webhook_url: '', mode: local}}", "monitoring.alertmanager.mode", "'local'"),
    ("{alertmanager: {mode: external}}", "monitoring.alertmanager.external_urls", "()"),
    ("{alertmanager: {mode: external, external_urls: ['am.example:9093']}}",
     "monitoring.alertmanager.external_urls[0]", "'am.example:9093'"),
    ("{cadvisor: {image: 'ghcr.io/google/cadvisor:latest'}}", "monitoring.cadvisor.image", "'ghcr.io"),
    ("{node_exporter: {systemd_units: ['ssh|cron']}}", "monitoring.node_exporter.systemd_units[0]", "'ssh|cron'"),
    ("{node_exporter: {listen_address: '0.0.0.0:9100'}}", "monitoring.node_exporter.listen_address", "'0.0.0.0:9100'"),
    ("{alertmanager: {listen_address: '[::]:9093'}}", "monitoring.alertmanager.listen_address", "'[::]:9093'"),
])
def test_bad_monitoring_settings_exit_2(inventory_dir, extra, field, value):
    result = run_cli("validate", str(inventory_dir(inventory(extra))))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"host 'spark-01', field '{field}' = {value}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_broken_ssh_host_is_refused_where_it_is_written(inventory_dir):
    """It would otherwise become every default listen address: refused at ssh_host itself."""
    text = BASE.replace("    MONITORING\n", "").replace("{ssh_host: 192.0.2.11}", "{ssh_host: 'bad host!'}")
    result = run_cli("validate", str(inventory_dir(text)))
    assert result.returncode == 2
    assert "field 'ssh_host' = 'bad host!'" in result.stderr and "a DNS name or an IP address" in result.stderr


def test_disabled_role_is_not_checked(inventory_dir):
    text = BASE.replace("    MONITORING\n", "").replace("enabled: true", "enabled: false, cadvisor: "
                                                           "{disable_metrics_extra: [bogus]}")
    assert run_cli("validate", str(inventory_dir(text))).returncode == 0


def test_good_settings(inventory_dir):
    extra = ("{alertmanager: {mode: external, external_urls: ['https://am.example.org/prefix']}, "
             "prometheus: {vllm_targets: ['[2001:db8::5]:8000'], extra_rules: [{alert: X, expr: up == 0, for: 5m}]},"
             " alerts: {overrides: {warn_percent: 20, forecast_for: 5m}}}")
    result = run_cli("validate", str(inventory_dir(inventory(extra))))
    assert result.returncode == 0, result.stderr


def test_every_interface_needs_the_explicit_opt_in(inventory_dir):
    text = inventory("{node_exporter: {listen_address: '0.0.0.0:9100'}}")
    refused = run_cli("validate", str(inventory_dir(text)))
    assert refused.returncode == 2 and "monitoring.allow_all_interfaces: true" in refused.stderr, refused.stderr
    allowed = text.replace("monitoring: {node_exporter", "monitoring: {allow_all_interfaces: true, node_exporter")
    assert run_cli("validate", str(inventory_dir(allowed))).returncode == 0


@pytest.mark.parametrize("text,expected", [
    ("127.0.79.1:9100", ("127.0.79.1", 9100)),
    ("[::1]:9090", ("::1", 9090)),
    ("node-1.example:8080", ("node-1.example", 8080)),
])
def test_split_host_port(text, expected):
    assert split_host_port(text) == expected


@pytest.mark.parametrize("text", ["", ":9100", "0.0.0.0", "::1:9090", "a b:1", "host:0", "host:x", "1.2.3.999:80"])
def test_split_host_port_refuses(text):
    with pytest.raises(ValueError):
        split_host_port(text)
