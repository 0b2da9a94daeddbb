"""How sparkguard reads managed files on a node: mode, owner, group and sha256 of many files in ONE command.

One reader for all of them: the probe (audit, and apply's snapshot) embeds ``FS_HELPER``, and
``ManagedFilesState`` (a file operation reading for itself, or a snapshot gone stale) runs the same
shell function. It forks one ``stat`` and one ``sha256sum`` for all files, not one of each per file,
and a batch whose answers do not line up leaves its files unknown rather than guessing.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable

from pyinfra.api import FactBase

FileState = dict[str, str]  # {"mode": "644", "owner": "root", "group": "root", "sha256": "ab12..."}
Seen = tuple[str, str]      # ("mode:owner:group", sha256) or ("absent", "-"): how the probe reports a file

# ``fs PATH...``: "@@F<tab>PATH<tab>absent<tab>-" per missing file, then for the present ones their paths
# (@@FP), one stat (@@FM) and one sha256sum (@@FH), in the same order. Paths holding a tab or a newline
# are skipped (their lines could not be told apart): they stay unknown. Needs ``t`` (a tab) and ``nl``.
FS_HELPER = r"""fs() { for p do shift; case $p in *"$t"*|*"$nl"*) continue;; esac
  if [ -f "$p" ]; then set -- "$@" "$p"; else printf '@@F\t%s\tabsent\t-\n' "$p"; fi; done
  [ $# -gt 0 ] || return 0; printf '@@FP\t%s\n' "$@"; stat -c "@@FM$t%a:%U:%G" -- "$@"
  sha256sum -z -- "$@" | tr '\0\n' '\n ' | cut -c1-64 | sed "s/^/@@FH$t/"; }"""

# ``dr PATH``: "@@T<tab>PATH<tab>mode:owner:group" for a real directory, "absent" for anything else.
DIR_HELPER = r"""dr() { if [ -d "$1" ] && [ ! -L "$1" ]; then printf '@@T\t%s\t%s\n' "$1" "$(stat -c '%a:%U:%G' "$1")"
  else printf '@@T\t%s\tabsent\n' "$1"; fi; }"""

SHELL_SETUP = "LC_ALL=C\nt=$(printf '\\t')\nnl='\n'"

BATCH_TAGS = ("@@FP", "@@FM", "@@FH")


def zipped(names: list[str], values: list[str]) -> dict[str, str]:
    """A batch's values by name, in the order asked; nothing when the counts differ (then every item of the
    batch is unknown: apply reads it itself, audit reports it, neither guesses)."""
    return dict(zip(names, values, strict=True)) if len(names) == len(values) else {}


def parse_files(lines: Iterable[str]) -> dict[str, Seen]:
    """What ``fs`` printed, by path (other lines are ignored)."""
    seen: dict[str, Seen] = {}
    batch: dict[str, list[str]] = {tag: [] for tag in BATCH_TAGS}
    for line in lines:
        tag, _, rest = line.partition("\t")
        if tag in batch:
            batch[tag].append(rest)
        elif tag == "@@F":
            path, _, value = rest.partition("\t")
            state, _, sha = value.partition("\t")
            seen[path] = (state, sha)
    present = batch["@@FP"]
    modes, hashes = zipped(present, batch["@@FM"]), zipped(present, batch["@@FH"])
    seen.update({path: (modes[path], hashes[path]) for path in present if path in modes and path in hashes})
    return seen


def file_state(seen: Seen) -> FileState | None:
    """``seen`` as the file operations use it (None: absent)."""
    if seen[0] == "absent":
        return None
    mode, owner, group = (seen[0].split(":") + ["", ""])[:3]
    return {"mode": mode, "owner": owner, "group": group, "sha256": seen[1]}


class ManagedFilesState(FactBase[dict[str, FileState | None]]):
    """The state of many files in ONE round trip: {path: state, or None when absent}; a path the node could
    not answer for is left out.

    Example::

        host.get_fact(ManagedFilesState, paths=("/etc/default/earlyoom", "/etc/sparkguard/node.json"))
        # {"/etc/default/earlyoom": {"mode": "644", "owner": "root", ...}, "/etc/sparkguard/node.json": None}
    """

    def command(self, paths: tuple[str, ...]) -> str:
        return "\n".join([SHELL_SETUP, FS_HELPER, "fs " + " ".join(shlex.quote(p) for p in paths), "true"])

    @staticmethod
    def default() -> dict[str, FileState | None]:
        return {}

    def process(self, output: Iterable[str]) -> dict[str, FileState | None]:
        return {path: file_state(seen) for path, seen in parse_files(output).items()}
