"""Where sparkguard puts things on a node. Shared by every role, defined once."""

CONFIG_DIR = "/etc/sparkguard"
STATE_DIR = "/var/lib/sparkguard"
LIB_DIR = "/usr/local/lib/sparkguard"
BIN_DIR = "/usr/local/bin"
UNIT_DIR = "/etc/systemd/system"
# Debian's node_exporter reads this textfile directory; every sparkguard metric lands here.
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
NODE_JSON = f"{CONFIG_DIR}/node.json"


def unit_path(name: str) -> str:
    return f"{UNIT_DIR}/{name}"


def dropin_path(unit: str, name: str = "50-sparkguard.conf") -> str:
    return f"{UNIT_DIR}/{unit}.d/{name}"

# Training mode: started by sparkguard-train (role swap), followed by serving (role vllm).
TRAINING_TARGET = "sparkguard-training.target"
SWAPOFF_SERVICE = "sparkguard-swapoff.service"
# Units whose processes are training (sparkguard-train's jobs, role swap) and serving (role vllm);
# the GPU ranking agent (role earlyoom) classifies processes by them.
TRAINING_JOB_PREFIX = "sparkguard-job-"
SERVING_UNIT_PREFIX = "sparkguard-vllm@"
SYSCTL_CHECK = f"{LIB_DIR}/sysctl-check"
# The node's memory budget (role budget), read by sparkguard-train's preflight (role swap).
BUDGET_JSON = f"{CONFIG_DIR}/budget.json"
# Which vLLM servers are in training mode now (role vllm), read by sparkguard-train's preflight.
VLLM_MODE_DIR = "/run/sparkguard/vllm"
