"""Running this machine's own tools (debootstrap, systemd-nspawn, qemu) for the sandbox and the test VMs.

One place for the Debian releases they build and how a missing or failing tool is reported, so the
developer's sandbox and the test harness cannot drift apart.
"""

from __future__ import annotations

import subprocess
from typing import Any

from .errors import SparkguardError

RELEASES = ("bookworm", "trixie")
MIRROR = "http://deb.debian.org/debian"


def run_tool(cmd: list[str], error: type[SparkguardError], who: str, install: str, *, tail: int = 800,
             timeout: float | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (captured, checked); a missing tool or a failure becomes ``error`` with the tool's own words."""
    try:
        return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, **kwargs)
    except FileNotFoundError as exc:
        raise error(f"{who}: '{cmd[0]}' is not installed; install {install}") from exc
    except subprocess.CalledProcessError as exc:
        raise error(f"{who}: `{' '.join(cmd[:5])}...` failed (exit {exc.returncode}): "
                    f"{(exc.stderr or exc.stdout or '').strip()[-tail:]}") from exc
