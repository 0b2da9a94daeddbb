"""Where sparkguard puts things on a node. Shared by every role, defined once.

A name that one role owns and others use (its target, its files) is in that role's ``interface.py``.
"""

CONFIG_DIR = "/etc/sparkguard"
STATE_DIR = "/var/lib/sparkguard"
LIB_DIR = "/usr/local/lib/sparkguard"
BIN_DIR = "/usr/local/bin"
UNIT_DIR = "/etc/systemd/system"
# Debian's node_exporter reads this textfile directory; every sparkguard metric lands here.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
# Apply's own: where a file is uploaded (in the login's home), staged (next to the file it replaces, so the
# rename is atomic), and where a restart that has not run yet is remembered. An apply killed between a
# config change and its restart leaves the marker, and the next apply restarts anyway.
UPLOAD_DIR = ".sparkguard-upload"
STAGE_DIR = ".sparkguard-stage"
PENDING_DIR = f"{STATE_DIR}/pending"


def unit_path(name: str) -> str:
    return f"{UNIT_DIR}/{name}"


def dropin_path(unit: str, name: str = "50-sparkguard.conf") -> str:
    return f"{UNIT_DIR}/{unit}.d/{name}"
