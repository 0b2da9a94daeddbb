"""Where an operator repository's CI installs sparkguard from: ``sparkguard init``'s requirements.txt line.

sparkguard is on no package index, and a pin by bare name (``sparkguard==0.2.0``) would install whatever a
squatter publishes under that name. So the pin names the source itself:

- ``--pin git+https://HOST/ORG/sparkguard.git@COMMIT`` (or ``git+ssh://...``): pip installs that commit;
- ``--pin PATH/sparkguard-*.whl``: the wheel is copied into the repository (``.sparkguard/wheels/``, reviewed
  like any file) and installed from there;
- no ``--pin``: this sparkguard's own git checkout, when it runs from one that has an ``origin`` remote
  (a checkout, or ``pipx install ./sparkguard`` of one): ``git+<origin>@<HEAD commit>``.

Anything else is refused (exit 2) with these forms, never written as a line that cannot install.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from ..errors import ConfigError, Problem

WHEELS = ".sparkguard/wheels"
_COMMIT = re.compile(r"[0-9a-f]{40}")
_VCS = re.compile(r"git\+(https|ssh|file)://[^\s@#]+(\.git)?@[0-9A-Za-z._/-]+")
# A wheel's file name as PEP 427 writes it: the name becomes a requirements.txt line, so nothing else passes.
_WHEEL = re.compile(r"sparkguard-[0-9A-Za-z._+]+-[0-9A-Za-z._]+-[0-9A-Za-z._]+-[0-9A-Za-z._]+\.whl")
_SCP = re.compile(r"([A-Za-z0-9._-]+@)?([A-Za-z0-9.-]+):(?!//)(.+)")
FORMS = ("--pin git+https://HOST/ORG/sparkguard.git@COMMIT (a commit your CI can fetch), or --pin "
         "PATH/sparkguard-VERSION-py3-none-any.whl (copied into the repository); a bare name is never pinned: "
         "sparkguard is on no index, and a squatter could publish one")


@dataclass(frozen=True)
class Pin:
    line: str                          # requirements.txt's sparkguard line
    wheel: tuple[str, bytes] | None    # (relative path in the repository, content) to copy, if any
    note: str                          # what init says about it


def pin_for(spec: str | None) -> Pin:
    if spec:
        return _explicit(spec)
    source = _own_source()
    found = _git_pin(source) if source else None
    if found is None:
        raise ConfigError([Problem("", "--pin", None, f"this sparkguard runs from no git checkout with an origin "
                                   f"remote, so init cannot name where CI installs it from: give {FORMS}")])
    return found


def _explicit(spec: str) -> Pin:
    if spec.endswith(".whl"):
        path = Path(spec).expanduser()
        if not _WHEEL.fullmatch(path.name) or not path.is_file():
            raise ConfigError([Problem("", "--pin", spec, f"not a sparkguard wheel file; give {FORMS}")])
        relative = f"{WHEELS}/{path.name}"
        return Pin(f"./{relative}", (relative, path.read_bytes()), f"pinned to the wheel copied to {relative}")
    if _VCS.fullmatch(spec):
        return Pin(f"sparkguard @ {spec}", None, f"pinned to {spec}")
    raise ConfigError([Problem("", "--pin", spec, f"neither a git URL with a commit nor a wheel; give {FORMS}")])


def _own_source() -> Path | None:
    """The directory this sparkguard was installed from (a checkout, or pipx/pip of a local directory)."""
    from ..paths import INSTALLED, REPO_ROOT

    if not INSTALLED:
        return REPO_ROOT
    try:
        direct = metadata.distribution("sparkguard").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    url = urlparse(json.loads(direct).get("url", "")) if direct else None
    return Path(unquote(url.path)) if url is not None and url.scheme == "file" else None


def _git(source: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _git_pin(source: Path) -> Pin | None:
    commit = _git(source, "rev-parse", "HEAD")
    origin = _git(source, "remote", "get-url", "origin")
    if not commit or not _COMMIT.fullmatch(commit) or not origin:
        return None
    url = _vcs_url(origin)
    if url is None:
        return None
    dirty = _git(source, "status", "--porcelain", "--untracked-files=no")
    note = f"pinned to {url}@{commit} (this sparkguard's checkout)"
    if dirty:
        note += "; that checkout has uncommitted changes, which the pin does not carry"
    return Pin(f"sparkguard @ {url}@{commit}", None, note)


def _vcs_url(origin: str) -> str | None:
    """A git remote as pip's VCS URL: https/ssh/file URLs as they are, scp-like ``user@host:path`` as ssh.

    >>> _vcs_url("git@github.com:org/sparkguard.git"), _vcs_url("https://example.org/sparkguard.git")
    ('git+ssh://git@github.com/org/sparkguard.git', 'git+https://example.org/sparkguard.git')
    >>> _vcs_url("/srv/git/sparkguard")
    'git+file:///srv/git/sparkguard'
    """
    if re.match(r"(https|ssh|file)://", origin):
        return f"git+{origin}" if "@" not in urlparse(origin).netloc or origin.startswith("ssh://") else None
    if origin.startswith("/"):
        return f"git+file://{origin}"
    match = _SCP.fullmatch(origin)
    if match:
        user, host, path = match.groups()
        return f"git+ssh://{user or ''}{host}/{path}"
    return None
