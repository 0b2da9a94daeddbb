"""A hung node still pages: its peer's Prometheus fires NodeExporterDown for it, and Watchdog always fires.

Own two bookworm nodes (127.0.82.1-2), torn down after the module. Each node's Prometheus scrapes
both exporters (monitoring.prometheus.node_targets, as inventory/example does). node-2 is then
hung outright: every process of the node gets SIGSTOP from the host (a frozen node, not a clean
stop: its exporter's socket still accepts connections and never answers, as a node thrashing in
swap does). node-1's Prometheus must fire NodeExporterDown for node-2. Then node-2 is thawed.

All of it runs behind monitoring.web: basic auth and TLS (one self-signed certificate for both
nodes) on node_exporter, Prometheus and Alertmanager, so the peers scrape each other through it,
a client without the password gets 401 from all three, and `sparkguard audit` reads through it.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from sparkguard.dev import sandbox
from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.run.runner import run_deploy
from tests.certs import self_signed
from tests.conftest import run_cli
from tests.sandbox.conftest import booted_sandbox, net

NET = net("127.0.82")
EXPORTERS = [f"{NET}.1:9100", f"{NET}.2:9100"]
USER, PASSWORD = "prom", "peers-share-this-password"
TLS: dict = {}


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("peers-tls"), [f"{NET}.1", f"{NET}.2"])
    TLS["context"] = ssl.create_default_context(cafile=str(cert))
    os.environ["SG_PEERS_WEB_PASSWORD"] = PASSWORD
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 2) as handle:
        inventory = handle.inventory_with(tmp_path_factory.mktemp("peers-inv"), extra_all_vars=(
            "    monitoring:\n"
            "      enabled: true\n"
            f"      prometheus: {{scrape_interval: 1s, evaluation_interval: 1s, node_targets: {json.dumps(EXPORTERS)}}}\n"
            # A receiver nobody listens on: Alertmanager runs (behind the auth) and the alerts reach it.
            "      alertmanager: {mode: local, webhook_url: 'http://127.0.0.1:9/hook'}\n"
            "      alerts: {overrides: {exporter_down_for: 5s}}\n"
            f"      web: {{basic_auth_user: {USER}, basic_auth_password_env: SG_PEERS_WEB_PASSWORD,"
            f" tls_cert_file: '{cert}', tls_key_file: '{key}'}}\n"))
        result = run_deploy(load_inventory(inventory), site_deploy)
        assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
        again = run_deploy(load_inventory(inventory), site_deploy)
        assert again.ok and again.changed == 0, json.dumps(again.as_dict(), indent=1, default=str)
        handle.secured_inventory = inventory
        yield handle
    os.environ.pop("SG_PEERS_WEB_PASSWORD", None)


def get(url: str, authenticated: bool = True) -> bytes:
    request = urllib.request.Request(url)
    if authenticated:
        request.add_header("Authorization", "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode())
    with urllib.request.urlopen(request, timeout=5, context=TLS["context"]) as response:
        return response.read()


def query(address: str, promql: str) -> list[dict]:
    url = f"https://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    return json.loads(get(url))["data"]["result"]


def alerts(address: str) -> list[dict]:
    return [r["metric"] for r in query(address, 'ALERTS{alertstate="firing"}')]


def up(address: str) -> dict[str, str]:
    return {r["metric"]["instance"]: r["value"][1] for r in query(address, 'up{job="node"}')}


def wait(what: str, predicate, timeout: float = 90):
    deadline, last = time.time() + timeout, None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except OSError as error:
            last = error
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def test_a_hung_node_is_paged_by_its_peer_and_watchdog_always_fires(peers):
    node1 = f"{NET}.1"
    assert wait("both exporters up on node-1's Prometheus", lambda: up(node1) == {e: "1" for e in EXPORTERS})
    assert wait("Watchdog firing", lambda: [a for a in alerts(node1) if a["alertname"] == "Watchdog"])
    frozen = sandbox.node_processes(peers.node("node-2").pid)
    assert len(frozen) > 5, frozen
    try:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        down = wait("NodeExporterDown for node-2 on node-1", lambda: [
            a for a in alerts(node1) if a["alertname"] == "NodeExporterDown" and a.get("instance") == EXPORTERS[1]],
            timeout=120)
        assert down[0]["severity"] == "critical"
        # node-1 itself is fine: no NodeExporterDown for it.
        assert not [a for a in alerts(node1) if a["alertname"] == "NodeExporterDown" and a.get("instance") == EXPORTERS[0]]
    finally:
        for pid in frozen:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
    assert wait("node-2 scraped again after the thaw", lambda: up(node1).get(EXPORTERS[1]) == "1")


@pytest.mark.parametrize("port", [9100, 9090, 9093])
def test_every_endpoint_refuses_a_client_without_the_password(peers, port):
    url = f"https://{NET}.1:{port}/metrics"
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(url, authenticated=False)
    assert refused.value.code == 401
    assert get(url)        # and answers the one that has it


def test_alerts_reach_alertmanager_through_the_auth_and_audit_reads_through_it(peers):
    node1 = f"{NET}.1"
    active = wait("node-1's Alertmanager known as active", lambda: json.loads(get(
        f"https://{node1}:9090/api/v1/alertmanagers"))["data"]["activeAlertmanagers"])
    assert active[0]["url"].startswith(f"https://{node1}:9093/")
    assert wait("Watchdog arrived in Alertmanager", lambda: [a for a in json.loads(get(
        f"https://{node1}:9093/api/v2/alerts")) if a["labels"]["alertname"] == "Watchdog"])
    audit = run_cli("audit", str(peers.secured_inventory), timeout=300)
    assert audit.returncode == 0, audit.stdout[-3000:] + audit.stderr[-2000:]
