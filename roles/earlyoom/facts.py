"""What the guard decision reads from a node: earlyoom's and nohang's versions, installed or apt's candidate.

The role's own lines of the one node-facts probe (``Role.fact_probe``): each prints ``key=value``, the
core keeps them in ``NodeInfo.raw`` without knowing what they mean, and ``guard_versions`` reads them here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sparkguard.facts import NodeInfo

PROBE_LINES = (
    'echo "earlyoom_version=$(earlyoom -v 2>&1 | head -n1)"',
    "echo \"earlyoom_candidate=$(apt-cache policy earlyoom 2>/dev/null | awk '/Candidate:/{print $2}')\"",
    "echo \"nohang_version=$(dpkg-query -W -f '${Version}' nohang 2>/dev/null)\"",
    "echo \"nohang_candidate=$(apt-cache policy nohang 2>/dev/null | awk '/Candidate:/{print $2}')\"",
)


def parse_version(text: str) -> tuple[int, ...] | None:
    """``earlyoom -v`` prints ``earlyoom v1.7``; apt's candidate looks like ``1.8.2-1``, ``1:1.8.2-1`` (an
    epoch), ``1.7-2build1`` or ``1.9.0-1ubuntu1`` (Ubuntu), or ``(none)``. None when there is no version.

    >>> parse_version("earlyoom v1.7"), parse_version("1:1.8.2-1"), parse_version("(none)")
    ((1, 7), (1, 8, 2), None)
    """
    match = re.search(r"(?:^|\bv|\s|^\d+:)(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match or "not found" in text:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


@dataclass(frozen=True)
class GuardVersions:
    """The guards' versions on one node; None where there is none (or none that parses)."""

    earlyoom: tuple[int, ...] | None = None
    earlyoom_candidate: tuple[int, ...] | None = None
    # nohang: the guard where the distro's earlyoom is 1.8+ (installed, else apt's candidate).
    nohang: tuple[int, ...] | None = None

    @property
    def earlyoom_effective(self) -> tuple[int, ...] | None:
        """What earlyoom will be after apply: the installed one, else what apt would install."""
        return self.earlyoom or self.earlyoom_candidate


def guard_versions(info: NodeInfo) -> GuardVersions:
    raw = info.raw
    return GuardVersions(
        earlyoom=parse_version(raw.get("earlyoom_version", "")),
        earlyoom_candidate=parse_version(raw.get("earlyoom_candidate", "")),
        nohang=parse_version(raw.get("nohang_version", "")) or parse_version(raw.get("nohang_candidate", "")),
    )
