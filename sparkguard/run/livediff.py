"""What an apply would change in each managed file, against the live node: `sparkguard apply --dry --diff`.

render compares two branches; a reviewer also needs the node as it is (a hand edit, a package's
default, an earlier sparkguard). During a dry run, converge hands each role's desired state here;
one fact reads every managed file of the role in one round trip, and a unified diff is kept per host.
A secret file's content is never read back or printed: only whether it differs (by sha256, on the node).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import shlex
from collections.abc import Iterable

from pyinfra.api import FactBase

from ..state import DesiredState
from . import context as run_context

MAX_BYTES = 1 << 20  # a larger live file is reported by size only
def collecting() -> bool:
    """This run asked for diffs (a dry run with --diff: ``run_context.begin(collect_diffs=True)``)."""
    return run_context.current().diffs is not None


class LiveFiles(FactBase[dict[str, "LiveFile"]]):
    """Each path's content (base64, up to MAX_BYTES) or sha256 only (``secret``), in one round trip.

    Example::

        host.get_fact(LiveFiles, paths=("/etc/default/earlyoom",), secret=("/etc/sparkguard/vllm/m.env",))
    """

    def command(self, paths: tuple[str, ...], secret: tuple[str, ...] = ()) -> str:
        lines = []
        for path in paths:
            quoted = shlex.quote(path)
            if path in secret:
                body = f"sha256sum {quoted} | cut -d' ' -f1"
                lines.append(f"if [ -f {quoted} ]; then printf '%s\\tsha\\t' {quoted}; {body}; "
                             f"else printf '%s\\tabsent\\n' {quoted}; fi")
            else:
                lines.append(f"if [ ! -f {quoted} ]; then printf '%s\\tabsent\\n' {quoted}; "
                             f"elif [ $(stat -c %s {quoted}) -gt {MAX_BYTES} ]; then printf '%s\\tbig\\n' {quoted}; "
                             f"else printf '%s\\tb64\\t' {quoted}; base64 -w0 {quoted}; echo; fi")
        return "; ".join(lines) + "; true"

    def process(self, output: Iterable[str]) -> dict[str, LiveFile]:
        found: dict[str, LiveFile] = {}
        for line in output:
            path, _, rest = line.partition("\t")
            kind, _, value = rest.partition("\t")
            if kind == "absent":
                found[path] = LiveFile(None, None)
            elif kind == "sha":
                found[path] = LiveFile(None, value.strip())
            elif kind == "big":
                found[path] = LiveFile(None, None, too_large=True)
            elif kind == "b64":
                found[path] = LiveFile(base64.b64decode(value.strip()), None)
        return found


class LiveFile:
    """A live file: its bytes (None when absent, secret or too large) and, for a secret, its sha256."""

    def __init__(self, content: bytes | None, sha256: str | None, too_large: bool = False):
        self.content = content
        self.sha256 = sha256
        self.too_large = too_large

    @property
    def absent(self) -> bool:
        return self.content is None and self.sha256 is None and not self.too_large


def file_diff(path: str, live: LiveFile | None, desired: str, secret: bool) -> str | None:
    """A unified diff of ``path`` (live -> desired), a one-line note for secrets and large files, or None if equal.

    >>> print(file_diff("/etc/x", LiveFile(b"a\\nb\\n", None), "a\\nc\\n", False), end="")
    --- /etc/x (node)
    +++ /etc/x (apply)
    @@ -1,2 +1,2 @@
     a
    -b
    +c
    >>> file_diff("/etc/x", LiveFile(b"same\\n", None), "same\\n", False) is None
    True
    """
    if secret:
        if live is not None and live.sha256 == hashlib.sha256(desired.encode()).hexdigest():
            return None
        state = "absent on the node" if live is None or live.absent else "differs"
        return f"--- {path}: secret file {state}; its content is not shown\n"
    if live is not None and live.too_large:
        return f"--- {path}: larger than {MAX_BYTES} bytes on the node; would be replaced\n"
    before = live.content.decode(errors="replace") if live is not None and live.content is not None else ""
    if live is not None and live.content is not None and before == desired:
        return None
    lines = difflib.unified_diff(before.splitlines(keepends=True), desired.splitlines(keepends=True),
                                 f"{path} (node)" if before or (live and not live.absent) else f"{path} (absent)",
                                 f"{path} (apply)")
    text = "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines)
    return text or None


def record(host_name: str, state: DesiredState, live: dict[str, LiveFile]) -> None:
    """Keep the diffs of one role's files on one host, in the run's context (converge calls it in a dry run
    that asked for diffs)."""
    diffs = run_context.current().diffs
    if diffs is None:
        return
    for managed in state.files:
        diff = file_diff(managed.path, live.get(managed.path), managed.content, managed.secret)
        if diff:
            diffs.setdefault(host_name, []).append(diff)
