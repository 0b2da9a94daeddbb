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
import tarfile
from collections.abc import Callable, Generator, Iterable
from dataclasses import dataclass
from typing import Any

from pyinfra import host
from pyinfra.api import FactBase, FileUploadCommand, StringCommand, operation
from pyinfra.operations import server, systemd

from ..layout import PENDING_DIR, STAGE_DIR, UPLOAD_DIR
from ..run import context as run_context
from ..run import node_lock
from ..state import FileBody, normal_mode
from .filestate import DIR_HELPER, FileState, ManagedFilesState

Commands = Generator[StringCommand | FileUploadCommand, None, None]


_FETCH = object()
FETCH: Any = _FETCH  # "not known: read it in the operation" (the default of every ``current``)


@dataclass(frozen=True)
class Known:
    """A value read earlier in this run (apply's snapshot), to be trusted only while ``fresh()``.

    Operations run long after the snapshot was taken; ``fresh`` says whether anything on the node has
    changed since (sparkguard.run.snapshot.fresh). While it has not, the value is exact and the operation needs
    no round trip of its own; after a change it reads the node again, as it would without a snapshot.
    """

    value: Any
    fresh: Callable[[], bool]
    # How to read it again when it is no longer fresh, if the caller knows a cheaper way than the
    # operation's own fact (one read for all of a role); ``None`` or FETCH from it: the operation's own.
    reread: Callable[[], Any] | None = None


def resolve(current: Any, read: Callable[[], Any]) -> Any:
    """``current`` as an operation may use it: a fresh ``Known`` value, an exact value, or read now."""
    if isinstance(current, Known):
        if current.fresh():
            return current.value
        value = current.reread() if current.reread is not None else _FETCH
        return read() if value is _FETCH else value
    return read() if current is _FETCH else current


# What an operation that changed something may have touched, where it can say (the run's
# ``RunContext.footprints``). A managed_file touches its own path only, so a change of one file leaves what is
# known of every other file exact (sparkguard.run.snapshot.fresh). Operations that cannot say (packages,
# restarts, Ensure fixes) record nothing and count as having touched everything.


def file_item(path: str) -> str:
    return f"file:{path}"


def directory_item(path: str) -> str:
    return f"directory:{path}"


def unit_item(name: str) -> str:
    return f"unit:{name}"


def footprint(host_name: str, op_hash: str | None) -> frozenset[str] | None:
    return run_context.current().footprints.get((host_name, op_hash))


def _touches(*items: str) -> None:
    """Inside an operation that is about to change something: it touches ``items`` and nothing else."""
    run_context.current().footprints[(host.name, host.current_op_hash)] = frozenset(items)




def pending_marker(service: str, action: str) -> str:
    return posixpath.join(PENDING_DIR, f"{service}.{action}")


@dataclass(frozen=True)
class FileSpec(FileBody):
    """One file of ``managed_files``: its ``FileBody`` (a failed ``validate`` fails the operation), plus
    ``pending``: markers (``pending_marker``) created just before the file goes live, so the restart it
    calls for survives an apply that dies in between."""

    pending: tuple[str, ...] = ()

    @classmethod
    def of(cls, body: FileBody, pending: tuple[str, ...] = ()) -> FileSpec:
        """The write of a declared file (a ``ManagedFile``): its body, and its markers."""
        return cls(body.path, body.content, body.mode, body.owner, body.group, body.validate, pending)


# The files (directories) a managed_files (directories) operation changed on a host, in order (the run's
# ``RunContext.changed_paths``). Restarts ask for their own file (``path_changed``); the report lists each one.
def changed_paths(host_name: str, op_hash: str | None) -> tuple[str, ...] | None:
    """The paths a managed_files or directories operation changed (None: not such an operation, or not run)."""
    return run_context.current().changed_paths.get((host_name, op_hash))


def path_changed(meta: Any, path: str) -> Callable[[], bool]:
    """An ``_if`` callable: the managed_files operation ``meta`` changed ``path`` in this run."""
    return lambda: bool(meta.did_change()) and path in (changed_paths(host.name, meta._hash) or ())


BUNDLE = ".sparkguard-bundle.tar"


@operation()
def managed_files(files: tuple[FileSpec, ...], current: Any = _FETCH, fence: str | None = None) -> Commands:
    """Install exact contents at several paths; each staged copy is checked before it goes live.

    One upload for all files that differ, however many: a tar ``bundle`` unpacked on the node into a
    private staging directory next to each target (the rename must not cross file systems). Each file
    goes live by ``mv`` after its own check passed and after every file before it went live (a unit's
    check may run the script listed before it), so the order of ``files`` is the order of going live.

    + current: {path: the file's state} when the caller read it (``ManagedFilesState``, or a ``Known``
      from apply's snapshot); the paths missing or not fresh are read here, all in one round trip
    + fence: this apply's lock holder on the node (``node_lock``). With it, every check and rename
      runs in ONE command that renames nothing once the holder is gone (the apply was killed or its
      connection dropped: a check still running on the node then never renames anything behind the next
      apply's back). Without it (plain ``pyinfra`` holds no lock) a rename is never sent in the command
      of a check: one command per checked file.

    Example::

        managed_files(
            name="sshd: files",
            files=(FileSpec("/etc/ssh/sshd_config.d/50-sparkguard.conf", rendered, validate="sshd -t -f {path}"),),
        )
    """
    states = _file_states(files, current)
    writes: list[FileSpec] = []
    fixes: list[str] = []
    fixed: list[str] = []
    for spec in files:
        have = states.get(spec.path)
        if have is None or have["sha256"] != hashlib.sha256(spec.content.encode()).hexdigest():
            writes.append(spec)
            continue
        fix = []
        if have["mode"] != normal_mode(spec.mode):
            fix.append(f"chmod {spec.mode} {shlex.quote(spec.path)}")
        if (have["owner"], have["group"]) != (spec.owner, spec.group):
            fix.append(f"chown {spec.owner}:{spec.group} {shlex.quote(spec.path)}")
        if fix:
            fixes += fix
            fixed.append(spec.path)
    changed = tuple(spec.path for spec in files if spec.path in fixed or spec in writes)
    run_context.current().changed_paths[(host.name, host.current_op_hash)] = changed
    _touches(*(file_item(path) for path in changed))
    if not writes:
        if fixes:
            yield _shell(fixes)
        return
    yield from _write(writes, fence, fixes)


def _file_states(files: tuple[FileSpec, ...], current: Any) -> dict[str, FileState | None]:
    """Each file's state: given and fresh, or read now (all unknown ones in one round trip)."""
    given = current if isinstance(current, dict) else {}
    states: dict[str, FileState | None] = {}
    unknown = []
    for spec in files:
        value = resolve(given.get(spec.path, _FETCH), lambda: _FETCH)
        if value is _FETCH:
            unknown.append(spec.path)
        else:
            states[spec.path] = value
    if unknown:
        read = host.get_fact(ManagedFilesState, paths=tuple(unknown)) or {}
        states.update({path: read.get(path) for path in unknown})  # unanswered: written again, never skipped
    return states


def _shell(steps: list[str]) -> StringCommand:
    return StringCommand("sh", "-c", shlex.quote(" && ".join(steps)))


def _bundle(writes: list[FileSpec]) -> bytes:
    """The new contents as a tar with members named 0, 1, ... (no path of ours ever reaches tar)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as bundle:
        for index, spec in enumerate(writes):
            data = spec.content.encode()
            member = tarfile.TarInfo(str(index))
            member.size, member.mode = len(data), 0o600
            bundle.addfile(member, io.BytesIO(data))
    return out.getvalue()


def _write(writes: list[FileSpec], fence: str | None, fixes: list[str]) -> Commands:
    """Stage every new content, then check and rename each in order (see ``managed_files``).

    Round trips: prepare, upload (under sudo: its copy and cleanup too), then one command with a fence,
    or one per checked file plus one without.
    """
    staged = {spec.path: posixpath.join(posixpath.dirname(spec.path), STAGE_DIR, posixpath.basename(spec.path))
              for spec in writes}
    stages = list(dict.fromkeys(posixpath.dirname(path) for path in staged.values()))
    if any(posixpath.basename(path) == BUNDLE for path in staged):
        raise ValueError(f"{BUNDLE} is the name of sparkguard's own staging bundle, not a file it can manage")
    bundle = posixpath.join(stages[0], BUNDLE)
    q_stages = " ".join(shlex.quote(d) for d in stages)
    directories = " ".join(shlex.quote(d) for d in dict.fromkeys(posixpath.dirname(s.path) for s in writes))
    prepare = f"mkdir -p {directories} && mkdir -p -m 0700 {q_stages}"
    temp = None
    if host.data.get("_sudo"):
        # Under sudo, pyinfra uploads as the SSH user to a temporary file, then copies it as root. Its
        # default is a predictable /tmp/pyinfra-<sha1> created with the SFTP umask (readable by every
        # local user, left behind if the copy fails). Ours lies in a 0700 directory of the SSH user's
        # home instead; the path is relative because SFTP and the sudo'd copy both start there.
        # Never through a symlink (checked first; chown -h would not follow one anyway).
        prepare += (f" && test ! -L {UPLOAD_DIR} && mkdir -p -m 0700 {UPLOAD_DIR} && "
                    f"chown -h \"${{SUDO_USER:-root}}\" {UPLOAD_DIR} && chmod 0700 {UPLOAD_DIR}")
        temp = f"{UPLOAD_DIR}/{hashlib.sha1(bundle.encode()).hexdigest()}"
    yield StringCommand(prepare)
    # Without sudo pyinfra writes straight to ``bundle`` (asking it for a temporary name costs a round trip).
    yield FileUploadCommand(io.BytesIO(_bundle(writes)), bundle, remote_temp_filename=temp)
    q_bundle = shlex.quote(bundle)

    def guarded(step: list[str]) -> str:
        """With a fence, everything that writes runs only while this apply holds the node's lock: after it
        is gone, only checks run on (they read their staged copy), and their result goes nowhere."""
        joined = " && ".join(step)
        return node_lock.fenced(fence, joined) if fence is not None else joined

    unpack = []
    for index, spec in enumerate(writes):
        q_staged = shlex.quote(staged[spec.path])
        unpack += [f"tar -xOf {q_bundle} {index} > {q_staged}", f"chown {spec.owner}:{spec.group} {q_staged}",
                   f"chmod {spec.mode} {q_staged}"]
    unpack.append(f"rm -f {q_bundle}")
    if any(spec.pending for spec in writes):
        unpack.append(f"mkdir -p -m 0700 {shlex.quote(PENDING_DIR)}")
    steps = [node_lock.fence_setup()] if fence is not None else []
    steps.append(guarded(unpack))
    for number, spec in enumerate(writes, 1):
        q_staged, q_path = shlex.quote(staged[spec.path]), shlex.quote(spec.path)
        if spec.validate:
            check = spec.validate.replace("{path}", q_staged)
            refused = shlex.quote(f"sparkguard: validation failed for {spec.path}; the live file was not touched")
            # A subshell: a check that ends with `exit` ends only itself, never the renames after it.
            steps.append(f"{{ ( {check}\n ) || {{ echo {refused} >&2; {guarded([f'rm -rf {q_stages}'])}; exit 1; }}; }}")
            if fence is None:
                yield _shell(steps)
                steps = []
        live = [f"touch {' '.join(shlex.quote(m) for m in spec.pending)}"] if spec.pending else []
        live.append(f"mv -f {q_staged} {q_path}")
        if number == len(writes):
            live += [f"rmdir {q_stages}", *fixes]
        steps.append(guarded(live))
    yield _shell(steps)


@operation()
def managed_file(path: str, content: str, mode: str = "0644", owner: str = "root", group: str = "root",
                 validate: str | None = None, current: Any = _FETCH, pending: tuple[str, ...] = (),
                 fence: str | None = None) -> Commands:
    """``managed_files`` for one file (``current``: its state, a ``Known`` or, by default, read here).

    Example::

        managed_file(
            name="sshd drop-in",
            path="/etc/ssh/sshd_config.d/50-sparkguard.conf",
            content=rendered,
            validate="sshd -t -f {path}",
        )
    """
    spec = FileSpec(path, content, mode, owner, group, validate, pending)
    yield from managed_files._inner(files=(spec,), current={path: current}, fence=fence)


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
        run = "systemctl daemon-reload"
    else:
        # A failed action says why in the apply's error: systemctl itself only says "see journalctl", so the
        # unit's last journal lines since the action began follow it on stderr (the error keeps stderr's last
        # lines). `-u`, not _SYSTEMD_UNIT=: systemd's own lines about the unit ("Main process exited,
        # status=1/FAILURE", "Failed to set up credentials") name failures in which the unit's process printed
        # nothing, or never ran. --sync first: journald may not have written the unit's last lines yet (a failed
        # Prometheus restart once showed only the old process's first three shutdown lines, 2026-12-07).
        # systemd's own verdict comes first, on one line: it needs no journal (a failed restart of journald
        # itself left only "Journal stopped" there, 2026-12-07), and Result= names what failed (timeout,
        # exit-code, signal; "success" when the unit was stopped again during its start).
        unit = shlex.quote(service)
        verdict = " ".join(f"-p {name}" for name in VERDICT_PROPERTIES)
        run = (f"t=$(date +%s); systemctl {action} {unit} || {{ rc=$?; "
               f"echo \"systemd: $(systemctl show {verdict} {unit} | paste -sd ' ')\" >&2; "
               "journalctl --sync 2>/dev/null; "
               f"journalctl -u {unit} --since @$t -n {FAILED_ACTION_LOG_LINES} --no-pager -o cat >&2; exit $rc; }}")
    yield _shell([run, f"rm -f {shlex.quote(marker)}"])  # the marker goes only once the action succeeded


# How many of a unit's journal lines a failed restart or reload adds to the apply's error: systemd's own two or
# three ("Main process exited, ...", "Failed with result ...") and the process's last ones; with systemctl's
# two lines and systemd's verdict, the nine the error keeps (run/runner.ERROR_LINES).
FAILED_ACTION_LOG_LINES = 6
# systemd's verdict on a unit whose restart or reload failed, read with `systemctl show`.
VERDICT_PROPERTIES = ("Result", "ExecMainStatus", "ActiveState", "SubState", "NRestarts")


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
    _touches(unit_item(unit))
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
def directories(items: tuple[Any, ...], current: Any = _FETCH) -> Commands:
    """Directories with a mode, owner and group (``None``: left as they are), all fixed in ONE command.

    + items: ``sparkguard.state.Directory`` entries (path, mode, owner, group)
    + current: {path: ``directory_as_desired``'s input, or a ``Known`` of it}; what is missing or no longer
      fresh is read here, all in one round trip. A symbolic link is never followed: the command fails.

    Example::

        directories(name="base: directories", items=(Directory("/var/lib/sparkguard/runs", "0755"),))
    """
    given = current if isinstance(current, dict) else {}
    seen = {item.path: resolve(given.get(item.path, _FETCH), lambda: _FETCH) for item in items}
    unknown = tuple(path for path, value in seen.items() if value is _FETCH)
    if unknown:
        read: dict[str, str] = host.get_fact(DirectoryStates, paths=unknown) or {}
        seen.update(read)
    steps, changed = [], []
    for item in items:
        if directory_as_desired(seen.get(item.path), item.mode, item.owner, item.group):
            continue
        q = shlex.quote(item.path)
        steps += [f"test ! -L {q}", f"mkdir -p {q}"]
        if item.mode is not None:
            steps.append(f"chmod {item.mode} {q}")
        if item.owner is not None:
            steps.append(f"chown {item.owner}{':' + item.group if item.group else ''} {q}")
        elif item.group is not None:
            steps.append(f"chgrp {item.group} {q}")
        changed.append(item.path)
    run_context.current().changed_paths[(host.name, host.current_op_hash)] = tuple(changed)
    _touches(*(directory_item(path) for path in changed))
    if steps:
        yield _shell(steps)


class DirectoryStates(FactBase[dict[str, str]]):
    """``mode:owner:group`` of real directories (not links), or "absent": the probe's ``dr`` in one command.

    Example::

        host.get_fact(DirectoryStates, paths=("/var/lib/sparkguard",))  # {"/var/lib/sparkguard": "755:root:root"}
    """

    def command(self, paths: tuple[str, ...]) -> str:
        return "\n".join([DIR_HELPER, *(f"dr {shlex.quote(p)}" for p in paths), "true"])

    @staticmethod
    def default() -> dict[str, str]:
        return {}

    def process(self, output: Iterable[str]) -> dict[str, str]:
        found = {}
        for line in output:
            tag, _, rest = line.partition("\t")
            path, _, value = rest.partition("\t")
            if tag == "@@T" and path:
                found[path] = value.strip()
        return found


@operation()
def service(service: str, running: bool | None, enabled: bool | None, current: Any = _FETCH) -> Commands:
    """pyinfra's ``systemd.service`` (running/enabled): when ``current`` says how the unit is, what pyinfra
    would run for that state, and nothing when it is as desired; otherwise pyinfra's own, reading the node.

    Example::

        service(name="earlyoom running", service="earlyoom.service", running=True, enabled=True)
    """
    seen = resolve(current, lambda: None)
    # Starting or enabling a unit changes that unit. (A unit it pulls in may start too: a later unit read
    # as stopped is then started once more, which changes nothing.)
    _touches(unit_item(service))
    if not seen or "SubState" not in seen or "UnitFileState" not in seen:
        yield from systemd.service._inner(service=service, running=running, enabled=enabled)
        return
    is_running = seen["SubState"] in RUNNING_SUBSTATES
    is_enabled = seen["UnitFileState"] in ENABLED_UNIT_FILE_STATES
    for wanted, now, act in ((running, is_running, ("start", "stop")), (enabled, is_enabled, ("enable", "disable"))):
        if wanted is not None and wanted != now:
            yield StringCommand("systemctl", act[0] if wanted else act[1], shlex.quote(service))


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
