"""Advice for a node nothing else watches: a hung node's own Prometheus cannot page for it."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

BASE = """
all:
  vars:
    monitoring: {{enabled: true, alertmanager: {{mode: none}}{all_extra}}}
  hosts:
    a: {{ssh_host: 10.0.0.1{a_extra}}}
    b: {{ssh_host: 10.0.0.2{b_extra}}}
"""
PEERS = ", prometheus: {node_targets: ['10.0.0.1:9100', '10.0.0.2:9100']}"


@pytest.mark.parametrize("all_extra,a_extra,b_extra,advised", [
    ("", "", "", ["a", "b"]),                          # each scrapes only itself: nothing pages for either
    (PEERS, "", "", []),                                # peers (the example inventory's pattern)
    ("", "", ", monitoring: {prometheus: {node_targets: ['10.0.0.1:9100']}}", ["b"]),  # b watches a only
    ("", ", monitoring: {watched_externally: true}", ", monitoring: {watched_externally: true}", []),
    ("", ", monitoring: {enabled: false}", "", ["b"]),  # a has no monitoring: no advice for it
])
def test_unwatched_nodes_are_advised_and_validate_still_passes(inventory_dir, all_extra, a_extra, b_extra, advised):
    directory = inventory_dir(BASE.format(all_extra=all_extra, a_extra=a_extra, b_extra=b_extra))
    result = run_cli("validate", str(directory))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("advice: ")]
    assert [line.split("'")[1] for line in lines] == advised, result.stderr
    for line in lines:
        assert "cannot page" in line and "node_targets" in line and "watched_externally" in line
