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
