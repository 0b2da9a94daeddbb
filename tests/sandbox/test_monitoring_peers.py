"""A hung node still pages: its peer's Prometheus fires NodeExporterDown for it, and Watchdog always fires.

Own two bookworm nodes (127.0.82.1-2), torn down after the module. Each node's Prometheus scrapes
both exporters (monitoring.prometheus.node_targets, as inventory/example does). node-2 is then
hung outright: every process of the node gets SIGSTOP from the host (a frozen node, not a clean
stop: its exporter's socket still accepts connections and never answers, as a node thrashing in
swap does). node-1's Prometheus must fire NodeExporterDown for node-2. Then node-2 is thawed.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from sparkguard.converge import site_deploy
from sparkguard.inventory import load_inventory
from sparkguard.runner import run_deploy
from tests.sandbox.conftest import booted_sandbox

NET = "127.0.82"
EXPORTERS = [f"{NET}.1:9100", f"{NET}.2:9100"]


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    with booted_sandbox(tmp_path_factory, "bookworm", NET, 2) as handle:
        inventory = handle.inventory_with(tmp_path_factory.mktemp("peers-inv"), extra_all_vars=(
            "    monitoring:\n"
            "      enabled: true\n"
            f"      prometheus: {{scrape_interval: 1s, evaluation_interval: 1s, node_targets: {json.dumps(EXPORTERS)}}}\n"
            "      alertmanager: {mode: none}\n"
            "      alerts: {overrides: {exporter_down_for: 5s}}\n"))
        result = run_deploy(load_inventory(inventory), site_deploy)
        assert result.ok, result.as_dict()
        yield handle


def alerts(address: str) -> list[dict]:
    url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": 'ALERTS{alertstate="firing"}'})
    with urllib.request.urlopen(url, timeout=5) as response:
        return [r["metric"] for r in json.loads(response.read())["data"]["result"]]


def up(address: str) -> dict[str, str]:
    url = f"http://{address}:9090/api/v1/query?" + urllib.parse.urlencode({"query": 'up{job="node"}'})
    with urllib.request.urlopen(url, timeout=5) as response:
        return {r["metric"]["instance"]: r["value"][1] for r in json.loads(response.read())["data"]["result"]}


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


def node_processes(nspawn_pid: int) -> list[int]:
    """Every host PID inside the node (descendants of its systemd-nspawn, not nspawn itself)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    inside, frontier = set(), {nspawn_pid}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - inside
        inside |= frontier
    return sorted(inside)


def test_a_hung_node_is_paged_by_its_peer_and_watchdog_always_fires(peers):
    node1 = f"{NET}.1"
    assert wait("both exporters up on node-1's Prometheus", lambda: up(node1) == {e: "1" for e in EXPORTERS})
    assert wait("Watchdog firing", lambda: [a for a in alerts(node1) if a["alertname"] == "Watchdog"])
    frozen = node_processes(peers.node("node-2").pid)
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
