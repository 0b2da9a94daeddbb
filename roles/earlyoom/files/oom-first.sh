#!/bin/sh
# Managed by sparkguard (role earlyoom).
# sparkguard-oom-first -- CMD [ARGS...]
#
# Run CMD as the node's first OOM victim (oom_score_adj=1000, inherited by its
# children). GPU driver memory is not in any process's RSS, so by oom_score a
# trainer holding 100 GB of unified memory looks like an idle process and the
# kernel or earlyoom would kill a bystander (the vLLM API server) instead.
# Containers: docker run --oom-score-adj=1000 ...
set -eu
if [ "${1:-}" = "--" ]; then shift; fi
if [ "$#" -eq 0 ]; then
  echo "usage: sparkguard-oom-first -- CMD [ARGS...]" >&2
  exit 2
fi
echo 1000 > /proc/self/oom_score_adj
exec "$@"
