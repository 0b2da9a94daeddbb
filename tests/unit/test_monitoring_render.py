"""Role monitoring, rendered for inventory/example: promtool accepts it, and every file says what it should."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sparkguard.engine.render import render_inventory
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.monitoring.cadvisor import UPSTREAM_DISABLED, VALID_METRICS
from sparkguard.roles.monitoring.grafana import DATASOURCE_UID
from tests.conftest import REPO, in_ci

# The example reads its webhook URL from this variable on the operator's machine: set here, it must still
# never reach the render.
WEBHOOK = "https://alerts.example.org/hooks/s3cr3t"


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("render")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARKGUARD_WEBHOOK_URL", WEBHOOK)
        render_inventory(load_inventory(REPO / "inventory" / "example"), out)
    return out


def tool(name: str, how: str) -> str:
    """A checker the tests run on renders: on PATH or in .venv/bin; missing under CI is a failure, not a skip."""
    path = shutil.which(name) or (str(REPO / ".venv/bin" / name) if (REPO / ".venv/bin" / name).exists() else None)
    if path is None:
        if in_ci():
            pytest.fail(f"{name} not found ({how}); CI is set, so this is a failure")
        pytest.skip(f"{name} not found ({how})")
    return path


@pytest.fixture(scope="module")
def promtool() -> str:
    return tool("promtool", "apt-get install prometheus")


@pytest.fixture(scope="module")
def amtool() -> str:
    return tool("amtool", "./dev.sh install unpacks it")


def test_promtool_accepts_the_render_as_it_is(rendered, promtool):
    """A reviewer runs the real tool on the render itself: rule_files are relative to prometheus.yml."""
    for host in ("spark-01", "spark-02"):
        root = rendered / host / "etc/prometheus"
        check = subprocess.run([promtool, "check", "rules", str(root / "sparkguard-alerts.yml")],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        check = subprocess.run([promtool, "check", "config", str(root / "prometheus.yml")], capture_output=True,
                               text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        assert "1 rule files found" in check.stdout and "SUCCESS" in check.stdout


def test_the_nodes_syntax_check_passes_where_the_full_one_cannot_see_the_rules(rendered, promtool, tmp_path):
    """On the node the staged prometheus.yml sits in a stage directory without its rules beside it: the
    full check fails there (it loads rule_files), --syntax-only (what apply runs) passes; the rules file
    has its own check."""
    staged = tmp_path / "prometheus.yml"
    staged.write_text((rendered / "spark-01/etc/prometheus/prometheus.yml").read_text())
    assert subprocess.run([promtool, "check", "config", str(staged)], capture_output=True).returncode != 0
    done = subprocess.run([promtool, "check", "config", "--syntax-only", str(staged)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_amtool_accepts_the_rendered_alertmanager_yml_with_the_webhook_shown_as_secret(rendered, amtool):
    """The example sets a webhook: render shows the whole routing, the URL as <secret>, never a placeholder."""
    config = rendered / "spark-01/etc/prometheus/alertmanager.yml"
    text = config.read_text()
    assert "alerts.example.org" not in text and '"https://secret.invalid/<secret>"' in text
    assert yaml.safe_load(text)["route"]["receiver"] == "sparkguard"
    done = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not any("alerts.example.org" in p.read_text(errors="replace") for p in rendered.rglob("*") if p.is_file())


def test_prometheus_jobs_targets_and_cadvisor_network_drop(rendered):
    config = yaml.safe_load((rendered / "spark-02/etc/prometheus/prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"prometheus", "node", "cadvisor", "vllm"}
    assert jobs["node"]["static_configs"][0]["targets"] == ["192.0.2.11:9100", "192.0.2.12:9100"]  # and its peer
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["192.0.2.12:9090"]
    assert jobs["vllm"]["static_configs"][0]["targets"] == ["192.0.2.12:8000"]
    assert jobs["cadvisor"]["metric_relabel_configs"] == [
        {"source_labels": ["__name__"], "regex": "container_network_.*", "action": "drop"}]
    assert config["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["192.0.2.12:9093"]
    assert config["rule_files"] == ["sparkguard-alerts.yml"]   # beside prometheus.yml, resolved there
    assert "vllm" not in {j["job_name"] for j in yaml.safe_load(
        (rendered / "spark-01/etc/prometheus/prometheus.yml").read_text())["scrape_configs"]}


def test_defaults_files_bind_the_node_address_with_the_right_collectors(rendered):
    node = (rendered / "spark-01/etc/default/prometheus-node-exporter").read_text()
    args = node.split('ARGS="', 1)[1].rstrip('"\n').split()
    assert args == [
        "--web.listen-address=192.0.2.11:9100",
        "--collector.textfile.directory=/var/lib/prometheus/node-exporter",
        "--collector.systemd",
        "--collector.systemd.unit-include=(earlyoom|nohang|ssh|prometheus.*|sparkguard-.*)[.](service|socket|timer|path|target)",
        "--collector.pressure",
        "--collector.meminfo",
    ]
    prometheus = (rendered / "spark-01/etc/default/prometheus").read_text()
    assert ('ARGS="--web.listen-address=192.0.2.11:9090 --storage.tsdb.retention.time=30d '
            '--storage.tsdb.retention.size=10GB"') in prometheus
    alertmanager = (rendered / "spark-01/etc/default/prometheus-alertmanager").read_text()
    assert 'ARGS="--web.listen-address=192.0.2.11:9093 --cluster.listen-address="' in alertmanager
    assert "0.0.0.0" not in node + prometheus + alertmanager


def test_unit_include_regex_matches_only_the_units_that_matter():
    import re

    text = (REPO / "tests/golden/example/spark-01/etc/default/prometheus-node-exporter").read_text()
    regex = re.search(r"unit-include=(\S+)", text).group(1).rstrip('"')
    anchored = re.compile(f"^(?:{regex})$")  # node_exporter anchors it the same way
    for unit in ("earlyoom.service", "ssh.service", "ssh.socket", "prometheus.service",
                 "prometheus-node-exporter.service", "sparkguard-node-metrics.timer", "sparkguard-training.target"):
        assert anchored.match(unit), unit
    for unit in ("systemd-journald.service", "dbus.service", "earlyoomXservice", "cron.service"):
        assert not anchored.match(unit), unit


def test_cadvisor_unit_disables_defaults_plus_network(rendered):
    unit = (rendered / "spark-01/etc/systemd/system/sparkguard-cadvisor.service").read_text()
    disabled = unit.split("--disable_metrics=", 1)[1].split()[0].split(",")
    assert set(UPSTREAM_DISABLED) | {"network", "tcp", "udp", "advtcp"} == set(disabled)
    assert len(disabled) == len(set(disabled)) and set(disabled) <= set(VALID_METRICS)
    for flag in ("--docker_only=true", "--store_container_labels=false", "--housekeeping_interval=10s",
                 "--network=host", "--listen_ip=192.0.2.11", "--port=8080", "ghcr.io/google/cadvisor:v0.53.0"):
        assert flag in unit
    assert "ConditionPathExists=/usr/bin/docker" in unit


def test_grafana_dashboard_loads_by_file_provisioning(rendered):
    root = rendered / "spark-01/etc/sparkguard/grafana"
    text = (root / "dashboards/node-memory-truth.json").read_text()
    assert "${DS_" not in text and "__inputs" not in text
    dashboard = json.loads(text)
    titles = [p["title"] for p in dashboard["panels"]]
    for needle in ("earlyoom lines", "Forecast", "PSI", "Swap", "outside every cgroup", "earlyoom kills",
                   "Training mode", "vLLM KV"):
        assert any(needle in title for title in titles), (needle, titles)
    for panel in dashboard["panels"]:
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID
            assert "container_memory" not in target["expr"]  # never node health from container metrics
    lines = [t["expr"] for t in dashboard["panels"][0]["targets"]]
    assert any("* 8 / 100" in e for e in lines) and any("* 4 / 100" in e for e in lines)  # earlyoom's -m 8,4
    datasource = yaml.safe_load((root / "provisioning/datasources/sparkguard.yml").read_text())
    assert datasource["datasources"][0]["uid"] == DATASOURCE_UID
    assert datasource["datasources"][0]["url"] == "http://192.0.2.11:9090"
    provider = yaml.safe_load((root / "provisioning/dashboards/sparkguard.yml").read_text())
    assert provider["providers"][0]["options"]["path"] == "/etc/sparkguard/grafana/dashboards"


def test_state_orders_rules_before_config_and_reloads_on_change(rendered):
    state = yaml.safe_load((rendered / "spark-01.state.yml").read_text())["monitoring"]
    paths = [f["path"] for f in state["files"]]
    assert paths.index("/etc/prometheus/sparkguard-alerts.yml") < paths.index("/etc/prometheus/prometheus.yml")
    validators = {f["path"]: f.get("validate") for f in state["files"]}
    assert validators["/etc/prometheus/prometheus.yml"] == "promtool check config --syntax-only {path}"
    assert validators["/etc/prometheus/sparkguard-alerts.yml"] == "promtool check rules {path}"
    assert validators["/etc/prometheus/alertmanager.yml"] == "amtool check-config {path}"
    services = {s["name"]: s for s in state["services"]}
    assert services["prometheus.service"]["reload_on"] == ["/etc/prometheus/prometheus.yml",
                                                           "/etc/prometheus/sparkguard-alerts.yml"]
    assert "/etc/prometheus/prometheus.yml" not in services["prometheus.service"]["restart_on"]
    assert state["packages"] == ["prometheus-node-exporter", "prometheus", "prometheus-alertmanager"]


def test_alert_lines_come_from_earlyoom_settings(inventory_dir, tmp_path):
    path = inventory_dir("""
        all:
          vars:
            node: {memory_total_gib: 121.7, device_profile: dgx-spark}
            earlyoom: {term_percent: 6, kill_percent: 3}
            monitoring: {enabled: true, alertmanager: {mode: none}, alerts: {overrides: {warn_percent: 12}}}
          hosts:
            h1: {ssh_host: 192.0.2.1}
        """)
    render_inventory(load_inventory(path), tmp_path)
    rules = (tmp_path / "h1/etc/prometheus/sparkguard-alerts.yml").read_text()
    assert "earlyoom SIGTERM 6%, SIGKILL 3%" in rules
    assert "< 12\n" in rules and "< 8\n" in rules  # warning 12, critical 6 + 2
    assert "alerting" not in yaml.safe_load((tmp_path / "h1/etc/prometheus/prometheus.yml").read_text())
    assert not (tmp_path / "h1/etc/prometheus/alertmanager.yml").exists()
