"""One shell script that reads everything a host's desired states are about, and its parser.

`sparkguard audit` and apply's snapshot (sparkguard/run/snapshot.py) both read a node with it: one SSH
command prints, line by line, the node's facts (``facts.probe_lines``), each package's status, every managed
file's sha256/mode/owner, each service's state, each sysctl's live value, each ``Ensure`` check's result,
the files an edit works on, what an ``Absent*`` entry finds and what an interrupted apply left behind.
The script only reads; all comparing happens on the operator's machine.
"""

from __future__ import annotations

import base64
import hashlib
import shlex
from collections.abc import Iterable

from pyinfra.api import FactBase

from ..audit.checks import ProbeOutput, ensure_key
from ..facts import NodeInfo, parse_probe, probe_lines
from ..state import DesiredState
from .filestate import DIR_HELPER, FS_HELPER, SHELL_SETUP, parse_files, zipped
from .operations import PENDING_DIR, STAGE_DIR, UPLOAD_DIR, MatchingFiles, TemplateUnits

MANAGER = "org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager"

HELPERS = "\n".join([SHELL_SETUP, r"""
f() { if [ -f "$2" ]; then printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(stat -c '%a:%U:%G' "$2")" "$(sha256sum < "$2" | cut -d' ' -f1)"; else printf '%s\t%s\tabsent\t-\n' "$1" "$2"; fi; }
r() { printf '@@R\t%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ')"; }
pk() { printf '@@P\t%s\t%s\n' "$1" "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || echo absent)"; }""", FS_HELPER, DIR_HELPER, r"""
sv() { for u do printf '@@E\t%s\t%s\n' "$u" "$(systemctl is-enabled "$u" 2>/dev/null || true)"; done
  printf '@@SN\t%s\n' "$@"; systemctl is-active -- "$@" 2>/dev/null | sed "s/^/@@SA$t/"; }
su() { printf '@@UN\t%s\n' "$@"; systemctl show -p SubState -p UnitFileState -- "$@" 2>/dev/null | awk -v RS= '{gsub(/\n/, " "); print "@@UV\t" $0}'; }
sc() { printf '@@K\t%s\t%s\n' "$1" "$(tr '\t\n' '  ' < "/proc/sys/$(printf '%s' "$1" | tr . /)" 2>/dev/null || echo absent)"; }
ck() { if ( eval "$2" ) >/dev/null 2>&1; then printf '@@C\t%s\tyes\n' "$1"; else printf '@@C\t%s\tno\n' "$1"; fi; }
ed() { if [ -f "$2" ]; then printf '@@D\t%s\t%s\n' "$1" "$(base64 -w0 < "$2")"; else printf '@@D\t%s\tabsent\n' "$1"; fi; }
mp() { printf '%s' "$(busctl get-property $MANAGER "$1" 2>/dev/null)"; }
"""])


def q(value: str) -> str:
    return shlex.quote(value)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def absent_files_key(state: DesiredState, index: int) -> str:
    """Unique across the variants of one role's state (two variants may list different globs at one index)."""
    return f"absent_files.{state.role}.{index}.{_digest(*state.absent_files[index].globs)}"


def absent_units_key(state: DesiredState, index: int) -> str:
    return f"absent_units.{state.role}.{index}.{_digest(state.absent_instances[index].template)}"


def edit_key(state: DesiredState, index: int) -> str:
    return f"{state.role}.{index}"


def stage_directories(states: Iterable[DesiredState]) -> list[str]:
    """Where an interrupted apply may have left a staging directory: next to every managed or edited file."""
    paths = [m.path for s in states for m in s.files] + [e.path for s in states for e in s.edits]
    return sorted({p.rsplit("/", 1)[0] or "/" for p in paths})


def state_lines(states: list[DesiredState], for_apply: bool = False) -> list[str]:
    """The probe lines of the desired states; ``for_apply`` adds what only apply needs (directories, services
    in pyinfra's own terms, the mode and owner of edited files).

    Files, services and units are read in one batch each (one ``stat``, one ``sha256sum``, one
    ``systemctl is-active``/``show`` for all of them): a fork per item was most of the probe's time.
    """
    lines: list[str] = []
    files: list[str] = []
    services: list[str] = []
    units: list[str] = []
    for state in states:
        lines += [f"pk {q(package)}" for package in state.packages]
        files += [managed.path for managed in state.files]
        services += [service.name for service in state.services]
        lines += [f"sc {q(key)}" for key in state.sysctls]
        for index, edit in enumerate(state.edits):
            lines.append(f"ed {q(edit_key(state, index))} {q(edit.path)}")
        for index, item in enumerate(state.ensures):
            lines.append(f"ck {q(ensure_key(state, index))} {q(item.check)}")
        for index, absent in enumerate(state.absent_files):
            lines.append(f"r {q(absent_files_key(state, index))} \"$({MatchingFiles().command(absent.globs)})\"")
        for index, gone in enumerate(state.absent_instances):
            lines.append(f"r {q(absent_units_key(state, index))} \"$({TemplateUnits().command(gone.template)})\"")
        if for_apply:
            lines += [f"dr {q(directory.path)}" for directory in state.directories]
            units += [s.name for s in state.services if s.running is not None or s.enabled is not None]
            files += [edit.path for edit in state.edits]
    lines = list(dict.fromkeys(lines))  # variants of one role share most lines
    for helper, names in (("fs", files), ("sv", services), ("su", units)):
        if names:
            lines.append(" ".join([helper, *(q(name) for name in dict.fromkeys(names))]))
    stages = " ".join(q(f"{d}/{STAGE_DIR}") for d in stage_directories(states))
    lines.append(f"r leftovers \"$(ls -A {q(PENDING_DIR)} 2>/dev/null | sed 's/^/pending:/'; "
                 f"for p in {stages} {UPLOAD_DIR}/*; do [ -e \"$p\" ] && echo \"$p\"; done)\"")
    return lines


def script(lines: list[str]) -> str:
    """The node's facts, the helpers, then ``lines``; it never fails (every read degrades to a value)."""
    return "\n".join([probe_lines(), f"MANAGER={q(MANAGER)}", HELPERS, *lines, "true"]) + "\n"


class NodeProbe(FactBase[str]):
    """Run a probe script; its raw output (``parse_output`` reads it)."""

    def command(self, script: str) -> str:
        return script

    def process(self, output: Iterable[str]) -> str:
        return "\n".join(output)


def parse_output(text: str) -> ProbeOutput:
    out = ProbeOutput(info=parse_probe("\n".join(line for line in text.splitlines() if not line.startswith("@@"))))
    batch: dict[str, list[str]] = {}
    enabled: dict[str, str] = {}
    for line in text.splitlines():
        if not line.startswith("@@"):
            continue
        tag, *rest = line.split("\t")
        rest += [""] * 4
        if tag in ("@@SN", "@@SA", "@@UN", "@@UV"):
            batch.setdefault(tag, []).append(rest[0])
        elif tag == "@@V":
            out.found_files[rest[0]] = (rest[1], rest[2])
        elif tag == "@@P":
            out.packages[rest[0]] = rest[1].strip()
        elif tag == "@@E":
            enabled[rest[0]] = rest[1].strip()
        elif tag == "@@K":
            out.sysctls[rest[0]] = " ".join(rest[1].split())
        elif tag == "@@C":
            out.ensures[rest[0]] = rest[1].strip() == "yes"
        elif tag == "@@D":
            out.edits[rest[0]] = None if rest[1] == "absent" else base64.b64decode(rest[1]).decode(errors="replace")
        elif tag == "@@T":
            out.directories[rest[0]] = rest[1].strip()
        elif tag == "@@R":
            out.runtime[rest[0]] = rest[1].strip()
    out.files.update(parse_files(text.splitlines()))
    active = zipped(batch.get("@@SN", []), [a.strip() for a in batch.get("@@SA", [])])
    out.services.update({name: (state, active[name]) for name, state in enabled.items() if name in active})
    shown = zipped(batch.get("@@UN", []), batch.get("@@UV", []))
    out.units.update({name: dict(p.split("=", 1) for p in value.split() if "=" in p) for name, value in shown.items()})
    return out


class NodeFacts(FactBase[NodeInfo]):
    """Classify a node (unified memory or not) and read MemTotal, swap, earlyoom, init, distro.

    Example::

        info = host.get_fact(NodeFacts)
        if info.unified_memory: ...
    """

    def command(self) -> str:
        return probe_lines() + "true\n"

    def process(self, output: list[str]) -> NodeInfo:
        return parse_probe("\n".join(output))
