"""Role monitoring on a real bookworm node: Debian's node_exporter, Prometheus and Alertmanager,
configured by sparkguard, scraping, alerting and validating before anything goes live.

Own sandbox (one node on 127.0.79.1), torn down after the module. Only loopback addresses;
the unified-memory hog takes the host-wide hugepage lock (tests/replay.py).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.conftest import run_cli
from tests.replay import GIB, ReplayPlan, hugepage_budget, install_tools, run_replay
from tests.sandbox.conftest import booted_sandbox, net

NET = net("127.0.79")
ADDR = f"{NET}.1"
PROM = f"http://{ADDR}:9090"
STANDIN_PORT = 18080
HOOK_PORT = 18081
HOOK_LOG = "/run/sg-hook.jsonl"
LAB_ENV = "SPARKGUARD_LAB_THRESHOLDS"

# A cAdvisor stand-in (container series, the host NIC's totals among them) and a webhook receiver.
STANDIN = f'''#!/usr/bin/env python3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

METRICS = b"""# TYPE container_network_receive_bytes_total counter
container_network_receive_bytes_total{{id="/docker/abc",name="vllm",interface="eth0"}} 6.0e10
# TYPE container_memory_working_set_bytes gauge
container_memory_working_set_bytes{{id="/docker/abc",name="vllm"}} 7.7e9
"""

class Metrics(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(METRICS)
    def log_message(self, *args):
        pass

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open("{HOOK_LOG}", "ab") as log:
            log.write(body.replace(b"\\n", b" ") + b"\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass

hook = ThreadingHTTPServer(("{ADDR}", {HOOK_PORT}), Hook)
threading.Thread(target=hook.serve_forever, daemon=True).start()
ThreadingHTTPServer(("{ADDR}", {STANDIN_PORT}), Metrics).serve_forever()
'''


def monitoring_vars(overrides: str = "", prometheus_extra: str = "") -> str:
    return (
        "    monitoring:\n"
        "      enabled: true\n"
        "      node_exporter: {metrics_interval_s: 5}\n"
        f"      prometheus: {{scrape_interval: 1s, evaluation_interval: 1s, cadvisor_targets: ['{ADDR}:{STANDIN_PORT}']"
        f"{prometheus_extra}}}\n"
        f"      alertmanager: {{webhook_url: 'http://{ADDR}:{HOOK_PORT}/hook', group_wait: 1s}}\n"
        f"      alerts: {{overrides: {{{overrides}}}}}\n"
    )


@pytest.fixture(scope="module")
def mon(tmp_path_factory):
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 1) as handle:
        rootfs = Path(handle.node("node-1").rootfs)
        (rootfs / "usr/local/bin/sg-standin").write_text(STANDIN)
        (rootfs / "usr/local/bin/sg-standin").chmod(0o755)
        yield handle


@pytest.fixture(scope="module")
def inventory(mon, tmp_path_factory):
    return mon.inventory_with(tmp_path_factory.mktemp("mon-inv"), extra_all_vars=monitoring_vars())


def apply(inventory_dir):
    return run_deploy(load_inventory(inventory_dir), site_deploy)


def prom(path: str, **params) -> dict:
    url = f"{PROM}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def query(expr: str) -> list:
    return prom("/api/v1/query", query=expr)["data"]["result"]


def wait_for(what, predicate, timeout: float = 60, interval: float = 1.0):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError as error:  # Prometheus restarting
            last = error
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def main_pid(mon, unit: str) -> str:
    return mon.ssh("node-1", f"systemctl show -p MainPID --value {unit}")[1].strip()


def test_apply_scrapes_node_exporter_on_loopback_and_second_apply_is_clean(mon, inventory):
    first = apply(inventory)
    assert first.ok, json.dumps(first.as_dict(), indent=1, default=str)
    second = apply(inventory)
    assert second.ok and second.changed == 0, [h.changed_names for h in second.hosts]

    rc, out, _ = mon.ssh("node-1", "systemctl is-active prometheus prometheus-node-exporter prometheus-alertmanager"
                                   " sparkguard-node-metrics.timer")
    assert out.split() == ["active"] * 4, out
    # Every listener is on the node's own address: nodes share the host's network namespace.
    rc, out, _ = mon.ssh("node-1", "ss -Hltnp | grep -E 'prometheus|alertmanager|node_exporter'")
    listeners = {line.split()[3] for line in out.splitlines()}
    assert listeners == {f"{ADDR}:9090", f"{ADDR}:9100", f"{ADDR}:9093"}, out

    targets = wait_for("node target up", lambda: [
        t for t in prom("/api/v1/targets")["data"]["activeTargets"]
        if t["labels"]["job"] == "node" and t["health"] == "up"])
    assert targets[0]["labels"]["instance"] == f"{ADDR}:9100"
    available = wait_for("MemAvailable", lambda: query('node_memory_MemAvailable_bytes{job="node"}'))
    assert float(available[0]["value"][1]) > 0
    # The textfile metrics and the systemd collector limited to the units that matter.
    wait_for("textfile metrics", lambda: query('sparkguard_memory_outside_cgroups_bytes{job="node"}'))
    assert query('sparkguard_training_mode{job="node"}')[0]["value"][1] == "0"
    assert query('sparkguard_earlyoom_kills_all_total{job="node"}')[0]["value"][1] == "0"
    units = {r["metric"]["name"] for r in query('node_systemd_unit_state{job="node",state="active"}')}
    assert "earlyoom.service" in units and "prometheus.service" in units
    assert not [u for u in units if u.startswith(("systemd-", "dbus"))], units
    rules = {r["name"] for g in prom("/api/v1/rules")["data"]["groups"] for r in g["rules"]}
    assert {"NodeMemoryAvailableLow", "NodeMemoryExhaustionForecast", "EarlyoomDown"} <= rules
    assert not [a for a in prom("/api/v1/alerts")["data"]["alerts"]
                if a["labels"]["alertname"] == "EarlyoomDown" and a["state"] == "firing"]



def test_audit_reads_the_live_monitoring_stack_and_names_a_dead_exporter(mon, inventory):
    """The monitoring rows of `sparkguard audit` come from the running daemons, not from files."""
    assert apply(inventory).ok
    result = run_cli("audit", str(inventory), "--json")
    checks = {c["name"]: c for c in json.loads(result.stdout)["hosts"][0]["checks"]}
    assert result.returncode == 0, [n for n, c in checks.items() if not c["ok"]]
    assert checks["monitoring: node_exporter up"]["ok"]
    assert checks["monitoring: Prometheus rules loaded"]["ok"]
    assert int(checks["monitoring: Prometheus rules loaded"]["actual"].split()[0]) >= 3
    mon.ssh("node-1", "systemctl stop prometheus-node-exporter")
    try:
        result = run_cli("audit", str(inventory), "--json")
        checks = {c["name"]: c for c in json.loads(result.stdout)["hosts"][0]["checks"]}
        assert result.returncode == 1
        assert checks["monitoring: node_exporter up"] == {
            "name": "monitoring: node_exporter up", "ok": False, "expected": "serving node_* metrics",
            "actual": "not answering"}
    finally:
        mon.ssh("node-1", "systemctl start prometheus-node-exporter")
    wait_for("node target up again", lambda: [
        t for t in prom("/api/v1/targets")["data"]["activeTargets"]
        if t["labels"]["job"] == "node" and t["health"] == "up"], timeout=90)

def test_rule_change_reloads_prometheus_without_restart(mon, inventory, tmp_path):
    assert apply(inventory).ok
    pid = main_pid(mon, "prometheus")
    exporter_pid = main_pid(mon, "prometheus-node-exporter")
    changed = mon.inventory_with(tmp_path / "inv", extra_all_vars=monitoring_vars("warn_for: 7m"))
    result = apply(changed)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    assert main_pid(mon, "prometheus") == pid
    assert main_pid(mon, "prometheus-node-exporter") == exporter_pid

    def warn_for():
        rules = {r["name"]: r for g in prom("/api/v1/rules")["data"]["groups"] for r in g["rules"]}
        return rules["NodeMemoryAvailableLow"]["duration"] == 420
    wait_for("reloaded rules", warn_for, timeout=20)
    assert apply(inventory).ok


def test_cadvisor_job_drops_container_network_series(mon, inventory):
    assert apply(inventory).ok
    mon.ssh("node-1", "systemctl stop sg-standin 2>/dev/null; systemctl reset-failed sg-standin 2>/dev/null; "
                      "systemd-run --unit sg-standin -q /usr/local/bin/sg-standin")
    wait_for("stand-in scraped", lambda: query('up{job="cadvisor"} == 1'), timeout=30)
    memory = wait_for("container memory stored", lambda: query('container_memory_working_set_bytes{job="cadvisor"}'))
    assert float(memory[0]["value"][1]) == 7.7e9
    time.sleep(3)  # a few more scrapes
    assert query('{__name__=~"container_network_.*"}') == []
    assert query('count_over_time({__name__=~"container_network_.*"}[5m])') == []


def test_broken_rule_fails_validation_and_live_config_stays(mon, inventory, tmp_path):
    assert apply(inventory).ok
    before = mon.ssh("node-1", "sha256sum /etc/prometheus/prometheus.yml /etc/prometheus/sparkguard-alerts.yml")[1]
    pid = main_pid(mon, "prometheus")
    broken = mon.inventory_with(tmp_path / "inv", extra_all_vars=monitoring_vars(
        prometheus_extra=", extra_rules: [{alert: Broken, expr: 'rate(node_load1[5m]'}]"))
    result = apply(broken)
    assert not result.ok
    errors = " ".join(e for h in result.hosts for e in h.errors)
    assert "sparkguard-site-rules.yml" in errors and "validation failed" in errors, errors
    assert mon.ssh("node-1", "test -e /etc/prometheus/sparkguard-site-rules.yml")[0] != 0
    assert mon.ssh("node-1", "sha256sum /etc/prometheus/prometheus.yml /etc/prometheus/sparkguard-alerts.yml")[1] == before
    assert main_pid(mon, "prometheus") == pid
    assert mon.ssh("node-1", "systemctl is-active prometheus")[1].strip() == "active"
    # Only node.json (role base records the settings, the broken ones included) changes back.
    again = apply(inventory)
    assert again.ok and all("node.json" in name for h in again.hosts for name in h.changed_names), json.dumps(again.as_dict(), indent=1, default=str)


@pytest.mark.replay
def test_memory_alert_fires_and_earlyoom_kill_reaches_prometheus(mon, tmp_path):
    """Lab lines near the host's current MemAvailable: a held hog crosses the warning line (alert fires,
    the webhook gets it), then the replay hog crosses earlyoom's line and the kill is counted.

    earlyoom_kill_window is 1m here: the first kill of a new victim name is reported only when the node
    was scraped one window earlier (docs/alerts.md, "known gap"), and this node is minutes old."""
    plan = ReplayPlan.from_host()
    # Lines as if 256 MiB of bystanders ran: phase A holds 1 GiB with none running; phase B's replay starts
    # its bystanders (more than that), which only brings earlyoom's line closer.
    plan.bystander_mib = 256
    warn = plan.percent(int(0.4 * GIB))
    overrides = (f"warn_percent: {warn}, warn_for: 3s, critical_margin_percent: 0.2, critical_for: 3s, "
                 f"forecast_below_percent: 100, earlyoom_kill_window: 1m")
    os.environ[LAB_ENV] = "1"
    try:
        lab = mon.inventory_with(
            tmp_path / "inv",
            extra_all_vars=monitoring_vars(overrides) +
            f"    earlyoom: {{term_percent: {plan.term_percent}, kill_percent: {plan.kill_percent}, "
            f"report_interval_s: 1}}\n")
        result = apply(lab)
        assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
        install_tools(mon, "node-1")
        mon.ssh("node-1", f"rm -f {HOOK_LOG}; systemctl is-active -q sg-standin || "
                          "systemd-run --unit sg-standin -q /usr/local/bin/sg-standin")

        def firing(name):
            return [a for a in prom("/api/v1/alerts")["data"]["alerts"]
                    if a["labels"]["alertname"] == name and a["state"] == "firing"]

        # Phase A: hold ~1 GiB: past the warning line (0.4 GiB + the 256 MiB bystander the plan assumes),
        # 0.5 GiB short of earlyoom's SIGTERM line.
        hold_mib = 1024
        with hugepage_budget(hold_mib // 2 + 64):
            rc, _, err = mon.ssh("node-1", f"systemd-run --unit sg-hold -q sparkguard-uma-hog --step-mib 64 "
                                           f"--interval-s 0.1 --max-mib {hold_mib} --hold --comm hold_hog")
            assert rc == 0, err
            try:
                alert = wait_for("NodeMemoryAvailableLow firing", lambda: firing("NodeMemoryAvailableLow"),
                                 timeout=60)
                assert alert[0]["labels"]["severity"] == "warning"
                hooked = wait_for("webhook notified", lambda: "NodeMemoryAvailableLow" in
                                  mon.ssh("node-1", f"cat {HOOK_LOG} 2>/dev/null")[1], timeout=30)
                assert hooked
                assert mon.ssh("node-1", "systemctl is-active sg-hold")[1].strip() == "active"  # no kill yet
            finally:
                mon.ssh("node-1", "systemctl stop sg-hold; systemctl reset-failed sg-hold 2>/dev/null; true")

        # Phase B: the replay crosses earlyoom's line; the kill is counted and reaches Prometheus.
        replay = run_replay(mon, "node-1", plan, timeout_s=90)
        assert replay.got_sigterm, replay.earlyoom_log[-1500:]
        kills = wait_for("kill counter in Prometheus",
                         lambda: query('sparkguard_earlyoom_kills_all_total{job="node"} > 0'), timeout=30)
        assert float(kills[0]["value"][1]) >= 1
        assert wait_for("per-victim counter", lambda: query(
            'sparkguard_earlyoom_kills_total{job="node",victim="python3"} > 0'), timeout=15)
        assert wait_for("EarlyoomKilledProcess", lambda: firing("EarlyoomKilledProcess"), timeout=30)
    finally:
        os.environ.pop(LAB_ENV, None)
        mon.ssh("node-1", "systemctl stop sg-standin sg-hold 2>/dev/null; true")
