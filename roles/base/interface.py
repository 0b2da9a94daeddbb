"""What role base offers the other roles by name: its target, its sysctl checker, its node document.

A role that names one of these declares base (``Role.requires``, ``uses`` or ``reads``);
tests/unit/test_architecture.py holds it to that.
"""

from sparkguard.layout import CONFIG_DIR, LIB_DIR

# Training mode: started by sparkguard-train (role swap), followed by serving (role vllm), reported by
# node-metrics (role monitoring).
TRAINING_TARGET = "sparkguard-training.target"
# Validates a sysctl.d file before it replaces the live one (roles swap and recovery use it on their files).
SYSCTL_CHECK = f"{LIB_DIR}/sysctl-check"
# The node's settings as applied; sparkguard-train (role swap) reads them.
NODE_JSON = f"{CONFIG_DIR}/node.json"
