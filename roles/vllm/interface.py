"""What role vllm offers the other roles by name.

A role that names one of these declares vllm (``Role.reads``); tests/unit/test_architecture.py holds it to that.
"""

# Each served model is an instance of this template: the GPU ranking agent (role earlyoom) knows serving by it.
SERVING_UNIT_PREFIX = "sparkguard-vllm@"
# Which servers are in training mode now (one NAME.mode file each); sparkguard-train's preflight (role swap)
# reads it.
MODE_DIR = "/run/sparkguard/vllm"
