#!/bin/sh
# Managed by sparkguard (role earlyoom): validate an /etc/default/earlyoom
# candidate before it replaces the live one. sparkguard passes the arguments it
# wrote into the file as this script's own words (shell-quoted by sparkguard),
# so nothing is sourced or evaluated here: the file must hold exactly one
# EARLYOOM_ARGS line, and earlyoom itself parses the arguments (--dryrun kills
# nothing). Still running after 2 s = accepted; an exit = rejected.
#   earlyoom-check-args CANDIDATE ARG...
set -u
candidate=$1
shift
if [ "$(grep -c '^EARLYOOM_ARGS=' "$candidate")" != 1 ] || grep -v -e '^#' -e '^$' "$candidate" | grep -qv '^EARLYOOM_ARGS='; then
  echo "earlyoom-check-args: $candidate must hold exactly one EARLYOOM_ARGS line and comments" >&2
  exit 1
fi
out=$(mktemp)
timeout 2 earlyoom "$@" --dryrun >"$out" 2>&1
rc=$?
if [ "$rc" -ne 124 ]; then
  echo "earlyoom rejected the arguments (exit $rc):" >&2
  tail -n 5 "$out" >&2
  rm -f "$out"
  exit 1
fi
rm -f "$out"
exit 0
