"""Which hosts a run touches: ``--limit`` patterns as Ansible operators write them, and the retry file.

A pattern is a comma-separated list of terms; each term is a host or group name, a glob over host
and group names (``spark-0*``), ``!term`` to exclude, or ``@FILE`` for the host names in a file (the
retry file a failed apply writes). Included are the hosts any positive term names (every host when
there is none), minus those any ``!`` term names.

Fail closed, unlike Ansible's warning: a term that names nothing is a typo, and a run limited by a
typo would quietly skip the node the operator meant. That is exit 2 before any connection.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from pathlib import Path

from .. import safe_write
from ..errors import ConfigError, Problem
from .loader import Inventory, InventoryHost

RETRY_FILE_MAX_BYTES = 1 << 20
_GLOB = set("*?[")


def split_terms(patterns: Iterable[str]) -> list[str]:
    """``["a,b", "!c"]`` -> ``["a", "b", "!c"]`` (``--limit`` may be given several times).

    >>> split_terms(["spark-01,spark-02", " !spark-03 "])
    ['spark-01', 'spark-02', '!spark-03']
    """
    return [term.strip() for pattern in patterns for term in pattern.split(",") if term.strip()]


def read_retry_file(term: str, path: Path) -> list[str]:
    """Host names in a retry file, one per line (``#`` comments and blank lines ignored)."""
    try:
        if not path.is_file():
            raise OSError("not a regular file")
        if path.stat().st_size > RETRY_FILE_MAX_BYTES:
            raise OSError(f"larger than {RETRY_FILE_MAX_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError([Problem("", "--limit", term, f"cannot read the host list {path}: {error}")]) from None
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _matches(inventory: Inventory, term: str) -> set[str]:
    """Host names one term (no ``!``, no ``@``) names: a host, a group's members, or a glob over both."""
    names = [h.name for h in inventory.hosts]
    if _GLOB & set(term):
        found = set(fnmatch.filter(names, term))
        for group in fnmatch.filter([g for g in inventory.groups if g != "all"], term):
            found |= set(inventory.groups[group])
        return found
    if term in names:
        return {term}
    if term in inventory.groups:
        return set(inventory.groups[term])
    return set()


def select_hosts(inventory: Inventory, patterns: list[str] | None) -> list[InventoryHost]:
    """The inventory's hosts that ``patterns`` select, in inventory order; exit 2 on a term naming nothing."""
    terms = split_terms(patterns or [])
    included: set[str] | None = None
    excluded: set[str] = set()
    problems = []
    for term in terms:
        negative = term.startswith("!")
        body = term[1:] if negative else term
        if body.startswith("@"):
            listed = read_retry_file(term, Path(body[1:]).expanduser())
            found: set[str] = set()
            for name in listed:
                if name not in {h.name for h in inventory.hosts}:
                    problems.append(Problem("", "--limit", term,
                                            f"lists host '{name}', which is not in the inventory {inventory.path}"))
                found.add(name)
        else:
            found = _matches(inventory, body)
            if not body or not found:
                problems.append(Problem("", "--limit", term, "names no host or group in the inventory "
                                        f"(hosts: {', '.join(h.name for h in inventory.hosts) or 'none'}; "
                                        f"groups: {', '.join(g for g in inventory.groups if g != 'all') or 'none'})"))
        if negative:
            excluded |= found
        else:
            included = (included or set()) | found
    if problems:
        raise ConfigError(problems)
    selected = [h for h in inventory.hosts if (included is None or h.name in included) and h.name not in excluded]
    if not selected:
        raise ConfigError([Problem("", "--limit", ",".join(terms), "selects no host (every host it names is excluded)")])
    return selected


def write_retry_file(path: Path, failed: list[str]) -> None:
    """The hosts to retry, for ``--limit @PATH``; a run with no failure removes the file.

    Written by sparkguard.safe_write: a link or a non-file at PATH is refused, never written through
    (apply checks it before it starts, too)."""
    if not failed:
        safe_write.remove(path)
        return
    safe_write.write(path, "# sparkguard: hosts that failed; retry with --limit @" + str(path) + "\n"
                     + "".join(f"{name}\n" for name in failed))
