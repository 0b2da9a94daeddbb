"""Process names earlyoom prefers and avoids, as the kernel reports them.

earlyoom matches ``--prefer``/``--avoid`` against /proc/PID/comm (at most 15
characters), not the command line. PyTorch renames its threads, so a trainer's
comm is ``pt_main_thread``, not ``python``; Debian's node_exporter binary
``prometheus-node-exporter`` shows as ``prometheus-node``; journald as
``systemd-journal``. vLLM's engine is ``VLLM::EngineCore`` and its API server
``vllm``: neither may ever be preferred.

No backslashes or quotes: the regex travels through /etc/default/earlyoom
(systemd EnvironmentFile, where ``\\.`` loses its backslash) and systemd's
ExecStart unquoting. Use ``[.]`` for a literal dot.
"""

from __future__ import annotations

import re

# Training processes: PyTorch's thread names and launchers.
TRAINING_NAMES = (
    "pt_main_thread",   # torch's main thread after import (pytorch#133690)
    "pt_elastic",       # torchrun / elastic agent
    "pt_data_worker",   # DataLoader workers
    "torchrun",
    "accelerate",
    "deepspeed",
)
# Plain interpreters: non-PyTorch trainers, but also any python3-named server.
PYTHON_NAMES = (
    "python",
    "python3",
    "python3[.][0-9]+",  # python3.11, python3.12 ...
)

# What must survive so the node stays reachable and the evidence is kept.
PROTECTED_NAMES = (
    "sshd",
    "sshd-session",     # OpenSSH 9.8+ per-connection process
    "systemd",
    "systemd-journal",  # systemd-journald, truncated to 15 characters
    "systemd-logind",
    "dbus-daemon",
    "dbus-broker",
    "earlyoom",
    "prometheus",
    "prometheus-node",  # Debian's prometheus-node-exporter, truncated
    "node_exporter",    # upstream binary name
    "containerd",
    "dockerd",
)

FORBIDDEN = re.compile(r"[\\'\"\s]")


def alternation(names: tuple[str, ...]) -> str:
    """Anchored ERE matching exactly one of the names.

    >>> alternation(("sshd", "python3[.][0-9]+"))
    '^(sshd|python3[.][0-9]+)$'
    """
    return "^(" + "|".join(names) + ")$"


def prefer_regex(extra: tuple[str, ...] = (), plain_python: bool = True) -> str:
    return alternation(TRAINING_NAMES + (PYTHON_NAMES if plain_python else ()) + tuple(extra))


def avoid_regex(extra: tuple[str, ...] = ()) -> str:
    return alternation(PROTECTED_NAMES + tuple(extra))


def fragment_problem(fragment: str) -> str | None:
    """Why a user-supplied name fragment cannot be used, or None."""
    if not fragment:
        return "an empty name would match every process"
    if FORBIDDEN.search(fragment):
        return ("must not contain backslashes, quotes or spaces (systemd's EnvironmentFile eats backslashes);"
                " write a literal dot as [.]")
    try:
        re.compile(fragment)
    except re.error as error:
        return f"is not a valid regular expression: {error}"
    if re.fullmatch(fragment, ""):
        return "matches the empty string, so it would match too much"
    return None
