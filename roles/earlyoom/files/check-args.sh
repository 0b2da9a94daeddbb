#!/bin/sh
# Managed by sparkguard (role earlyoom): validate an /etc/default/earlyoom
# candidate before it replaces the live one. sparkguard passes the arguments it
# wrote into the file as this script's own words (shell-quoted by sparkguard),
# so nothing is sourced or evaluated here: the file must hold exactly one
# EARLYOOM_ARGS line, and earlyoom itself parses the arguments (--dryrun kills
# nothing). Accepted: earlyoom printed the SIGKILL threshold line (1.7 to 1.9
# print it after every argument and regex was parsed, right before the poll
# loop) or is still running after 2 s; rejected: it exited before either.
#   earlyoom-check-args CANDIDATE ARG...
set -u
candidate=$1
shift
if [ "$(grep -c '^EARLYOOM_ARGS=' "$candidate")" != 1 ] || grep -v -e '^#' -e '^$' "$candidate" | grep -qv '^EARLYOOM_ARGS='; then
  echo "earlyoom-check-args: $candidate must hold exactly one EARLYOOM_ARGS line and comments" >&2
  exit 1
fi
# Running, not exited: an exited child the shell has not reaped yet is a zombie ("Z"), and kill -0 succeeds on it.
running() { state=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) && [ "$state" != Z ]; }
out=$(mktemp)
earlyoom "$@" --dryrun >"$out" 2>&1 &
pid=$!
tries=0
while running "$pid" && [ "$tries" -lt 40 ]; do
  if grep -qE '^ *(SIGKILL when|triggering kernel oom when)' "$out"; then
    break
  fi
  sleep 0.05
  tries=$((tries + 1))
done
if running "$pid"; then
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -f "$out"
  exit 0
fi
wait "$pid"
rc=$?
echo "earlyoom rejected the arguments (exit $rc):" >&2
tail -n 5 "$out" >&2
rm -f "$out"
exit 1
