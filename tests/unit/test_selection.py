"""--limit as operators write it (lists, globs, !exclude, @retry-file), and the retry file, as a table."""

from __future__ import annotations

import pytest

from sparkguard.errors import ConfigError
from sparkguard.inventory.loader import load_inventory
from sparkguard.inventory.selection import select_hosts, write_retry_file
from tests.conftest import run_cli

FLEET = """
all:
  vars:
    node: {memory_total_gib: 121.7}
  children:
    spark:
      children:
        spark_lab:
          hosts:
            spark-01: {ssh_host: 192.0.2.11}
            spark-02: {ssh_host: 192.0.2.12}
        spark_prod:
          hosts:
            spark-03: {ssh_host: 192.0.2.13}
    gh200:
      hosts:
        gh-01: {ssh_host: 192.0.2.21}
"""

ALL = ["spark-01", "spark-02", "spark-03", "gh-01"]


@pytest.fixture
def fleet(inventory_dir):
    return load_inventory(inventory_dir(FLEET))


@pytest.mark.parametrize(("patterns", "expected"), [
    (None, ALL),                                              # no --limit: every host
    ([], ALL),
    (["spark-02"], ["spark-02"]),                             # a host
    (["spark_lab"], ["spark-01", "spark-02"]),                # a group
    (["spark"], ["spark-01", "spark-02", "spark-03"]),        # a parent group: its children's hosts
    (["spark-01,gh-01"], ["spark-01", "gh-01"]),              # a comma list, inventory order kept
    (["gh-01", "spark-01"], ["spark-01", "gh-01"]),           # repeated --limit
    (["spark-0*"], ["spark-01", "spark-02", "spark-03"]),     # a glob over host names
    (["spark_p*"], ["spark-03"]),                             # a glob over group names
    (["spark-0[12]"], ["spark-01", "spark-02"]),
    (["!gh200"], ["spark-01", "spark-02", "spark-03"]),       # only an exclusion: all but it
    (["spark,!spark-02"], ["spark-01", "spark-03"]),          # a group minus a host
    (["*,!spark_prod,!gh-*"], ["spark-01", "spark-02"]),
])
def test_limit_patterns_select(fleet, patterns, expected):
    assert [h.name for h in select_hosts(fleet, patterns)] == expected


@pytest.mark.parametrize("pattern", ["spark-1", "spark_labs", "gpu*", "!spark-9", ",", "spark-01,,nope"])
def test_a_term_that_names_nothing_is_exit_2_not_a_silent_skip(fleet, pattern):
    if pattern == ",":
        assert [h.name for h in select_hosts(fleet, [pattern])] == ALL  # empty terms are no terms
        return
    with pytest.raises(ConfigError) as caught:
        select_hosts(fleet, [pattern])
    text = str(caught.value)
    assert "--limit" in text and "names no host or group" in text and "spark-01" in text


def test_excluding_everything_is_an_error(fleet):
    with pytest.raises(ConfigError, match="selects no host"):
        select_hosts(fleet, ["spark-01,!spark-01"])


def test_retry_file_round_trip(fleet, tmp_path):
    retry = tmp_path / "site.retry"
    write_retry_file(retry, ["spark-03", "gh-01"])
    assert [h.name for h in select_hosts(fleet, [f"@{retry}"])] == ["spark-03", "gh-01"]
    assert [h.name for h in select_hosts(fleet, [f"spark,!@{retry}"])] == ["spark-01", "spark-02"]
    write_retry_file(retry, [])
    assert not retry.exists()


def test_retry_file_problems_are_exit_2(fleet, tmp_path):
    stale = tmp_path / "stale.retry"
    stale.write_text("spark-01\nspark-99\n")
    with pytest.raises(ConfigError, match="lists host 'spark-99'"):
        select_hosts(fleet, [f"@{stale}"])
    with pytest.raises(ConfigError, match="cannot read the host list"):
        select_hosts(fleet, [f"@{tmp_path / 'missing.retry'}"])
    with pytest.raises(ConfigError, match="cannot read the host list"):
        select_hosts(fleet, [f"@{tmp_path}"])  # a directory


def test_cli_names_the_bad_term_and_touches_no_node(inventory_dir):
    # 192.0.2.0/24 is TEST-NET-1: never dialed, since a bad --limit is refused before connecting.
    path = inventory_dir(FLEET)
    done = run_cli("apply", str(path), "--limit", "spark-01,spark-1O")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "spark-1O" in done.stderr and "Traceback" not in done.stderr
    done = run_cli("audit", str(path), "--limit", "!*")
    assert done.returncode == 2 and "selects no host" in done.stderr


def test_unreachable_hosts_go_to_the_retry_file(inventory_dir, tmp_path):
    """Nothing listens on 127.0.98.1:22 on this machine: the connection is refused, nothing is applied,
    and the retry file names exactly the host that could not be reached."""
    path = inventory_dir("""
        all:
          vars:
            node: {memory_total_gib: 121.7}
            ssh_known_hosts_file: known_hosts
          hosts:
            down-01: {ssh_host: 127.0.98.1}
    """)
    retry = tmp_path / "apply.retry"
    done = run_cli("apply", str(path), "--retry-file", str(retry), timeout=120)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "down-01" in done.stderr and "Traceback" not in done.stderr
    assert [h.name for h in select_hosts(load_inventory(path), [f"@{retry}"])] == ["down-01"]
