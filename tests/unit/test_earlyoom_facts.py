"""Role earlyoom's own node facts: the guards' versions, read from its lines of the one probe."""

from __future__ import annotations

import pytest

from sparkguard.facts import parse_probe
from sparkguard.roles.earlyoom.facts import GuardVersions, guard_versions, parse_version


@pytest.mark.parametrize("text,expected", [
    ("earlyoom 1.7", (1, 7)),
    ("earlyoom v1.8.2", (1, 8, 2)),
    ("sh: 1: earlyoom: not found", None),
    ("", None),
    ("(none)", None),
    ("1:1.8.2-1", (1, 8, 2)),            # an epoch
    ("1.7-2build1", (1, 7)),             # Ubuntu rebuild
    ("1.9.0-1ubuntu1", (1, 9, 0)),       # Ubuntu delta
    ("2:1.10-1", (1, 10)),
    ("earlyoom (devel)", None),
])
def test_earlyoom_version(text, expected):
    assert parse_version(text) == expected


@pytest.mark.parametrize("probe,expected", [
    ("earlyoom_version=earlyoom v1.7\nnohang_candidate=0.2.0-2\n", GuardVersions((1, 7), None, (0, 2, 0))),
    ("earlyoom_version=sh: 1: earlyoom: not found\nearlyoom_candidate=1.8.2-1\nnohang_version=0.2.0-3\n",
     GuardVersions(None, (1, 8, 2), (0, 2, 0))),
    ("earlyoom_candidate=(none)\nnohang_candidate=(none)\n", GuardVersions()),
])
def test_guard_versions_read_the_roles_probe_keys(probe, expected):
    versions = guard_versions(parse_probe("memtotal_kb=1000\n" + probe))
    assert versions == expected
    assert versions.earlyoom_effective == (expected.earlyoom or expected.earlyoom_candidate)
