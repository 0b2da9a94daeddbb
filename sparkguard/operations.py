"""pyinfra operations sparkguard needs that pyinfra lacks.

pyinfra has no Ansible-style ``validate:``. ``managed_file`` stages the new
content next to the live file, runs the validator on the staged copy, and only
then renames it into place, so a config that sshd/promtool/systemd would reject
never replaces a working one.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import shlex
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, FileUploadCommand, StringCommand, operation
from pyinfra.operations import files, server, systemd

Commands = Generator[StringCommand | FileUploadCommand, None, None]
FileState = dict[str, str]


class ManagedFileState(FactBase[FileState | None]):
    """Mode, owner, group and sha256 of a file in one round trip; None if absent.

    Example::

        host.get_fact(ManagedFileState, path="/etc/default/earlyoom")
        # {"mode": "644", "owner": "root", "group": "root", "sha256": "ab12..."}
    """

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return (
            f"if [ -f {q} ]; then stat -c '%a %U %G' {q} && sha256sum {q} | cut -d' ' -f1; "
            f"else echo absent; fi"
        )

    def process(self, output: Iterable[str]) -> FileState | None:
        lines = [line.strip() for line in output if line.strip()]
        if not lines or lines[0] == "absent":
            return None
        mode, owner, group = lines[0].split()
        return {"mode": mode, "owner": owner, "group": group, "sha256": lines[1] if len(lines) > 1 else ""}


class ManagedFilesState(FactBase[dict[str, FileState | None]]):
    """ManagedFileState for many files in ONE round trip: {path: state or None}.

    Example::

        host.get_fact(ManagedFilesState, paths=("/etc/default/earlyoom", "/etc/sparkguard/node.json"))
    """

    def command(self, paths: tuple[str, ...]) -> str:
        quoted = " ".join(shlex.quote(p) for p in paths)
        return (
            f"for p in {quoted}; do if [ -f \"$p\" ]; then "
            f"printf '%s\\t%s %s\\n' \"$p\" \"$(stat -c '%a %U %G' \"$p\")\" \"$(sha256sum \"$p\" | cut -d' ' -f1)\"; "
            f"else printf '%s\\tabsent\\n' \"$p\"; fi; done"
        )

    def process(self, output: Iterable[str]) -> dict[str, FileState | None]:
        states: dict[str, FileState | None] = {}
        for line in output:
            path, _, rest = line.partition("\t")
            fields = rest.split()
            if len(fields) == 4:
                states[path] = {"mode": fields[0], "owner": fields[1], "group": fields[2], "sha256": fields[3]}
            else:
                states[path] = None
        return states


_FETCH = object()
FETCH: Any = _FETCH  # "not known: read it in the operation" (the default of every ``current``)


@dataclass(frozen=True)
class Known:
    """A value read earlier in this run (apply's snapshot), to be trusted only while ``fresh()``.

    Operations run long after the snapshot was taken; ``fresh`` says whether anything on the node has
    changed since (sparkguard.snapshot.fresh). While it has not, the value is exact and the operation needs
    no round trip of its own; after a change it reads the node again, as it would without a snapshot.
    """

    value: Any
    fresh: Callable[[], bool]
    # How to read it again when it is no longer fresh, if the caller knows a cheaper way than the
    # operation's own fact (one read for all files of a role); ``None``: the operation's own.
    reread: Callable[[], Any] | None = None


def resolve(current: Any, read: Callable[[], Any]) -> Any:
    """``current`` as an operation may use it: a fresh ``Known`` value, an exact value, or read now."""
    if isinstance(current, Known):
        return current.value if current.fresh() else (current.reread or read)()
    return read() if current is _FETCH else current


# What an operation that changed something may have touched, where it can say: {(host, op hash): items}.
# A managed_file touches its own path only, so a change of one file leaves what is known of every other
# file exact (sparkguard.snapshot.fresh). Operations that cannot say (packages, restarts, Ensure fixes)
# record nothing and count as having touched everything.
_footprints: dict[tuple[str, str | None], frozenset[str]] = {}


def file_item(path: str) -> str:
    return f"file:{path}"


def footprint(host_name: str, op_hash: str | None) -> frozenset[str] | None:
    return _footprints.get((host_name, op_hash))


def forget_footprints() -> None:
    _footprints.clear()


def _touches(*items: str) -> None:
    """Inside an operation that is about to change something: it touches ``items`` and nothing else."""
    _footprints[(host.name, host.current_op_hash)] = frozenset(items)


def normal_mode(mode: str) -> str:
    return str(int(str(mode), 8) and oct(int(str(mode), 8))[2:])


UPLOAD_DIR = ".sparkguard-upload"
STAGE_DIR = ".sparkguard-stage"
# A config change whose restart or reload has not run yet: created with the change, removed by the
# restart. An apply killed between the two leaves it, and the next apply restarts anyway.
PENDING_DIR = "/var/lib/sparkguard/pending"


def pending_marker(service: str, action: str) -> str:
    return posixpath.join(PENDING_DIR, f"{service}.{action}")


@operation()
def managed_file(path: str, content: str, mode: str = "0644", owner: str = "root", group: str = "root",
                 validate: str | None = None, current: Any = _FETCH, pending: tuple[str, ...] = ()) -> Commands:
    """Install exact content at ``path``; validate a staged copy before it goes live.

    + path: absolute path on the node
    + content: the full file content
    + mode/owner/group: ownership and permissions of the installed file
    + validate: shell command run on the staged copy, ``{path}`` replaced by its location;
      a non-zero exit leaves the live file untouched and fails the operation
    + current: the file's state when the caller already read it (``ManagedFilesState``, one
      round trip for many files, or a ``Known`` from apply's snapshot); by default it is read here
    + pending: markers (``pending_marker``) created just before the file goes live, so the
      restart it calls for survives an apply that dies in between

    Example::

        managed_file(
            name="sshd drop-in",
            path="/etc/ssh/sshd_config.d/50-sparkguard.conf",
            content=rendered,
            validate="sshd -t -f {path}",
        )
    """
    data = content.encode()
    want_sha = hashlib.sha256(data).hexdigest()
    want_mode = normal_mode(mode)
    current = resolve(current, lambda: host.get_fact(ManagedFileState, path=path))

    _touches(file_item(path))
    if current is not None and current["sha256"] == want_sha:
        if current["mode"] != want_mode:
            yield StringCommand("chmod", mode, shlex.quote(path))
        if (current["owner"], current["group"]) != (owner, group):
            yield StringCommand("chown", f"{owner}:{group}", shlex.quote(path))
        return

    directory, name = posixpath.split(path)
    stage_dir = posixpath.join(directory, STAGE_DIR)
    staged = posixpath.join(stage_dir, name)
    q_dir, q_staged, q_path = (shlex.quote(p) for p in (stage_dir, staged, path))
    # Round trips per new file: prepare, upload, then one command that sets ownership and renames into
    # place (3). A validated file takes one more: its check runs in a command of its own, BEFORE the rename
    # is even sent, so an apply killed while a check runs (earlyoom's takes 2 s) leaves a check that ends
    # on its own, never a rename that lands later, behind the next apply's back.
    prepare = f"mkdir -p {shlex.quote(directory)} && mkdir -p -m 0700 {q_dir}"
    temp = None
    if host.data.get("_sudo"):
        # Under sudo, pyinfra uploads as the SSH user to a temporary file, then copies it as root. Its
        # default is a predictable /tmp/pyinfra-<sha1> created with the SFTP umask (readable by every
        # local user, left behind if the copy fails). Ours lies in a 0700 directory of the SSH user's
        # home instead; the path is relative because SFTP and the sudo'd copy both start there.
        # Never through a symlink (checked first; chown -h would not follow one anyway).
        prepare += (f" && test ! -L {UPLOAD_DIR} && mkdir -p -m 0700 {UPLOAD_DIR} && "
                    f"chown -h \"${{SUDO_USER:-root}}\" {UPLOAD_DIR} && chmod 0700 {UPLOAD_DIR}")
        temp = f"{UPLOAD_DIR}/{hashlib.sha1(path.encode()).hexdigest()}"
    yield StringCommand(prepare)
    yield FileUploadCommand(io.BytesIO(data), staged, remote_temp_filename=temp or host.get_temp_filename(path))
    steps = [f"chown {owner}:{group} {q_staged}", f"chmod {mode} {q_staged}"]
    if validate:
        check = validate.replace("{path}", q_staged)
        refused = shlex.quote(f"sparkguard: validation failed for {path}; the live file was not touched")
        steps.append(f"{{ {check} || {{ echo {refused} >&2; rm -rf {q_dir}; exit 1; }}; }}")
        yield StringCommand("sh", "-c", shlex.quote(" && ".join(steps)))
        steps = []
    if pending:
        steps += [f"mkdir -p -m 0700 {shlex.quote(PENDING_DIR)}", f"touch {' '.join(shlex.quote(m) for m in pending)}"]
    steps += [f"mv -f {q_staged} {q_path}", f"rmdir {q_dir}"]
    yield StringCommand("sh", "-c", shlex.quote(" && ".join(steps)))


class Leftovers(FactBase[dict[str, list[str]]]):
    """What an interrupted apply left: staging directories next to managed files, uploads, pending markers.

    Example::

        host.get_fact(Leftovers, directories=("/etc/default", "/etc/systemd/system"))
        # {"staging": ["/etc/default/.sparkguard-stage"], "uploads": [], "pending": ["earlyoom.service.restart"]}
    """

    def command(self, directories: tuple[str, ...]) -> str:
        stages = " ".join(shlex.quote(posixpath.join(d, STAGE_DIR)) for d in directories)
        return (
            f"for p in {stages}; do if [ -d \"$p\" ] && [ ! -L \"$p\" ]; then printf 'staging\\t%s\\n' \"$p\"; fi; done; "
            f"if [ -d {UPLOAD_DIR} ] && [ ! -L {UPLOAD_DIR} ]; then "
            f"for p in {UPLOAD_DIR}/*; do [ -e \"$p\" ] && printf 'uploads\\t%s\\n' \"$p\"; done; fi; "
            f"for p in {shlex.quote(PENDING_DIR)}/*; do [ -f \"$p\" ] && printf 'pending\\t%s\\n' \"${{p##*/}}\"; done; true"
        )

    @staticmethod
    def default() -> dict[str, list[str]]:
        return {"staging": [], "uploads": [], "pending": []}  # a clean node prints nothing

    def process(self, output: Iterable[str]) -> dict[str, list[str]]:
        found: dict[str, list[str]] = self.default()
        for line in output:
            kind, _, path = line.partition("\t")
            if kind in found and path:
                found[kind].append(path)
        return found


@operation()
def leftovers_removed(directories: tuple[str, ...], found: Any = _FETCH) -> Commands:
    """Remove staging directories and uploads an interrupted apply left behind (never the live files).

    Safe because an apply holds the node's lock (``node_lock``): no other apply is staging now.

    Example::

        leftovers_removed(name="interrupted apply: leftovers", directories=("/etc/default",))
    """
    found = resolve(found, lambda: host.get_fact(Leftovers, directories=directories)) or Leftovers.default()
    stray = found["staging"] + found["uploads"]
    if stray:
        yield StringCommand("rm", "-rf", "--", *(shlex.quote(p) for p in stray))


@operation()
def service_action(service: str, action: str, marker: str) -> Commands:
    """``systemctl restart|reload`` a service, then drop its pending marker (the change is now live).

    Example::

        service_action(name="restart earlyoom", service="earlyoom.service", action="restart",
                       marker=pending_marker("earlyoom.service", "restart"), _if=...)
    """
    if action == "daemon-reload":
        yield StringCommand("systemctl", "daemon-reload")
    else:
        yield StringCommand("systemctl", action, shlex.quote(service))
    yield StringCommand("rm", "-f", shlex.quote(marker))


class MatchingFiles(FactBase[list[str]]):
    """Existing files matching shell globs (``*`` in the last component), e.g. ``/etc/sparkguard/vllm/*.yaml``.

    Example::

        host.get_fact(MatchingFiles, globs=("/etc/sparkguard/vllm/*.yaml", "/usr/local/lib/sparkguard/vllm-mode"))
    """

    def command(self, globs: tuple[str, ...]) -> str:
        parts = []
        for pattern in globs:
            directory, name = posixpath.split(pattern)
            parts.append(f"find {shlex.quote(directory)} -maxdepth 1 -mindepth 1 -name {shlex.quote(name)} "
                         f"\\( -type f -o -type l \\) -print 2>/dev/null")
        return "; ".join(parts) + "; true"

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: Iterable[str]) -> list[str]:
        return sorted({line.strip() for line in output if line.strip()})


class TemplateUnits(FactBase[list[str]]):
    """Units of a template systemd knows about (loaded, active or failed); ``instances_of`` names the instances.

    Example::

        host.get_fact(TemplateUnits, template="sparkguard-vllm@{}.service")  # ["sparkguard-vllm@llama-8b.service"]
    """

    def command(self, template: str) -> str:
        prefix, _, suffix = template.partition("{}")
        return (f"systemctl list-units --all --plain --no-legend {shlex.quote(prefix + '*' + suffix)} 2>/dev/null "
                f"| awk '{{ print $1 }}'; true")

    @staticmethod
    def default() -> list[str]:
        return []

    def process(self, output: Iterable[str]) -> list[str]:
        return [line.strip() for line in output if line.strip()]


def instances_of(template: str, units: Iterable[str]) -> list[str]:
    """``llama-8b`` from ``sparkguard-vllm@llama-8b.service`` for the template ``sparkguard-vllm@{}.service``."""
    prefix, _, suffix = template.partition("{}")
    names = {u[len(prefix):len(u) - len(suffix)] for u in units if u.startswith(prefix) and u.endswith(suffix)}
    return sorted(n for n in names if n)


class FileText(FactBase[str | None]):
    """A text file's content, or None when it does not exist."""

    def command(self, path: str) -> str:
        q = shlex.quote(path)
        return f"if [ -f {q} ]; then echo present; cat {q}; else echo absent; fi"

    def process(self, output: Iterable[str]) -> str | None:
        lines = list(output)
        if not lines or lines[0] != "present":
            return None
        return "\n".join(lines[1:]) + "\n" if len(lines) > 1 else ""


class CommandSucceeds(FactBase[bool]):
    """Whether a shell check exits 0 (used to skip work on a converged node)."""

    def command(self, check: str) -> str:
        # A subshell: a check may `exit` or define functions without ending or changing the fact's shell.
        return f"if ( {check}\n ) >/dev/null 2>&1; then echo yes; else echo no; fi"

    def process(self, output: Iterable[str]) -> bool:
        return list(output)[-1:] == ["yes"]


class UnitFileState(FactBase[str]):
    """`systemctl is-enabled` of a unit: enabled, disabled, masked, static, ... or not-found."""

    def command(self, unit: str) -> str:
        return f"systemctl is-enabled {shlex.quote(unit)} 2>/dev/null || true"

    def process(self, output: Iterable[str]) -> str:
        lines = [line.strip() for line in output if line.strip()]
        return lines[-1] if lines else "not-found"


@operation()
def ensure(check: str, fix: str, holds: Any = _FETCH) -> Commands:
    """Run ``fix`` only when ``check`` fails (``holds``: the check's result when already known).

    Example::

        ensure(name="swap off now", check="! grep -q / /proc/swaps", fix="swapoff -a")
    """
    if not resolve(holds, lambda: host.get_fact(CommandSucceeds, check=check)):
        yield StringCommand("sh", "-c", shlex.quote(fix))


@operation()
def unit_masked(unit: str, masked: bool = True, current: Any = _FETCH) -> Commands:
    """Mask or unmask a systemd unit (pyinfra's systemd.service cannot); ``current``: its is-enabled state.

    Example::

        unit_masked(name="no swap at boot", unit="swap.target", masked=True)
    """
    state = resolve(current, lambda: host.get_fact(UnitFileState, unit=unit))
    if masked and state != "masked":
        yield StringCommand("systemctl", "mask", shlex.quote(unit))
    elif not masked and state == "masked":
        yield StringCommand("systemctl", "unmask", shlex.quote(unit))


# pyinfra's own operations, behind a known current state: a node already as desired costs no round trip;
# otherwise pyinfra's operation decides and acts, reading the node as it always does.

RUNNING_SUBSTATES = ("running", "waiting", "exited", "listening", "mounted")  # pyinfra's SystemdStatus
ENABLED_UNIT_FILE_STATES = ("enabled", "static")                           # pyinfra's SystemdEnabled


def directory_as_desired(seen: str | None, mode: str | None, owner: str | None, group: str | None) -> bool:
    """``seen`` is ``mode:owner:group`` of a real directory (not a link), or "absent"."""
    if not seen or seen == "absent":
        return False
    have_mode, have_owner, have_group = (seen.split(":") + ["", ""])[:3]
    return ((mode is None or have_mode == normal_mode(mode)) and owner in (None, have_owner)
            and group in (None, have_group))


@operation()
def directory(path: str, mode: str | None, owner: str | None, group: str | None, current: Any = _FETCH) -> Commands:
    """pyinfra's ``files.directory``, skipped when ``current`` (``directory_as_desired``'s input) matches.

    Example::

        directory(name="runs", path="/var/lib/sparkguard/runs", mode="0755", owner="root", group="root")
    """
    seen = resolve(current, lambda: None)
    if seen is not None and directory_as_desired(seen, mode, owner, group):
        return
    yield from files.directory._inner(path=path, mode=mode, user=owner, group=group)


def service_as_desired(seen: dict[str, str] | None, running: bool | None, enabled: bool | None) -> bool:
    """``seen``: systemctl show's SubState and UnitFileState, judged as pyinfra's facts judge them."""
    if not seen or "SubState" not in seen or "UnitFileState" not in seen:
        return False
    is_running = seen["SubState"] in RUNNING_SUBSTATES
    is_enabled = seen["UnitFileState"] in ENABLED_UNIT_FILE_STATES
    return (running is None or running == is_running) and (enabled is None or enabled == is_enabled)


@operation()
def service(service: str, running: bool | None, enabled: bool | None, current: Any = _FETCH) -> Commands:
    """pyinfra's ``systemd.service`` (running/enabled), skipped when ``current`` says it already is.

    Example::

        service(name="earlyoom running", service="earlyoom.service", running=True, enabled=True)
    """
    seen = resolve(current, lambda: None)
    if seen is not None and service_as_desired(seen, running, enabled):
        return
    yield from systemd.service._inner(service=service, running=running, enabled=enabled)


@operation()
def sysctl(key: str, value: str, current: Any = _FETCH) -> Commands:
    """pyinfra's ``server.sysctl`` (the live value), skipped when ``current`` (whitespace-normalized) matches.

    Example::

        sysctl(name="swappiness", key="vm.swappiness", value="10")
    """
    seen = resolve(current, lambda: None)
    if seen is not None and seen == " ".join(str(value).split()):
        return
    yield from server.sysctl._inner(key=key, value=value)
