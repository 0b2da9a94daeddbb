"""What role swap offers the other roles by name.

A role that names one of these declares swap (``Role.reads``); tests/unit/test_architecture.py holds it to that.
"""

# sparkguard-train runs each job as a transient unit with this prefix: the GPU ranking agent (role earlyoom)
# knows a training job by it.
TRAINING_JOB_PREFIX = "sparkguard-job-"
# Turns swap off while the training target is active and back on when it stops.
SWAPOFF_SERVICE = "sparkguard-swapoff.service"
