"""Bad earlyoom settings fail validation with exit 2 (0 < kill < term <= 50, regexes usable)."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli

BASE = """
all:
  vars:
    node: {{memory_total_gib: 121.7}}
    earlyoom: {earlyoom}
  hosts:
    spark-01: {{ssh_host: 192.0.2.11}}
"""


@pytest.mark.parametrize("earlyoom,field,value", [
    ("{term_percent: 60}", "earlyoom.term_percent", "60"),
    ("{term_percent: 0}", "earlyoom.term_percent", "0"),
    ("{term_percent: 8, kill_percent: 8}", "earlyoom.kill_percent", "8"),
    ("{term_percent: 5, kill_percent: 6}", "earlyoom.kill_percent", "6"),
    ("{prefer_extra: ['(bad']}", "earlyoom.prefer_extra[0]", "'(bad'"),
    ("{avoid_extra: ['my\\\\.svc']}", "earlyoom.avoid_extra[0]", "'my"),
    ("{report_interval: 5}", "earlyoom.report_interval", "5"),
])
def test_bad_earlyoom_settings_exit_2(inventory_dir, earlyoom, field, value):
    result = run_cli("validate", str(inventory_dir(BASE.format(earlyoom=earlyoom))))
    assert result.returncode == 2, result.stdout
    assert f"host 'spark-01', field '{field}' = {value}" in result.stderr
    assert "Traceback" not in result.stderr


def test_good_earlyoom_settings(inventory_dir):
    text = BASE.format(earlyoom="{term_percent: 10, kill_percent: 5, prefer_extra: [my_trainer]}")
    assert run_cli("validate", str(inventory_dir(text))).returncode == 0


def _preflight(inventory_dir, raw: dict, newer: str = "refuse"):
    from sparkguard.facts import parse_probe
    from sparkguard.inventory.loader import load_inventory
    from sparkguard.roles.earlyoom.checks import preflight

    path = inventory_dir(f"""\
        all:
          hosts:
            h: {{ssh_host: 192.0.2.1, earlyoom: {{newer_version: {newer}}}}}
        """)
    probe = "memtotal_kb=1000000\n" + "".join(f"{k}={v}\n" for k, v in raw.items())
    return list(preflight(load_inventory(path).host("h").config, parse_probe(probe)))


@pytest.mark.parametrize("raw,refused", [
    ({"earlyoom_version": "earlyoom v1.7"}, False),
    ({"earlyoom_version": "sh: 1: earlyoom: not found", "earlyoom_candidate": "1.7-2build1"}, False),
    ({"earlyoom_version": "sh: 1: earlyoom: not found", "earlyoom_candidate": "1:1.8.2-1"}, True),   # was open
    ({"earlyoom_version": "", "earlyoom_candidate": "1.9.0-1ubuntu1"}, True),
    ({"earlyoom_version": "earlyoom (devel)"}, True),                     # unreadable: fail closed
    ({"earlyoom_version": "", "earlyoom_candidate": "weird~version"}, True),
    ({"earlyoom_version": "", "earlyoom_candidate": "(none)"}, False),
])
def test_version_table_fails_closed(inventory_dir, raw, refused):
    problems = _preflight(inventory_dir, raw)
    assert bool(problems) is refused, problems
    if raw.get("earlyoom_version") == "earlyoom (devel)":
        assert "cannot read earlyoom's version" in problems[0].allowed and problems[0].value == "earlyoom (devel)"


def test_unreadable_version_can_be_accepted_knowingly(inventory_dir):
    assert _preflight(inventory_dir, {"earlyoom_version": "earlyoom (devel)"}, "accept-anon-relative") == []
