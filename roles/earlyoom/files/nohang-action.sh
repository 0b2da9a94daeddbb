#!/bin/sh
# Managed by sparkguard (role earlyoom, guard nohang; shipped as it is: roles/earlyoom/files/nohang-action.sh).
# Every nohang action on this node. nohang.conf gives the role's values first, then nohang's own words:
#   nohang-action SCOPE RECORDER SPOOL JOBS MARKS term PID          nohang's soft action: SIGTERM the victim
#                                                                   (SCOPE group: its process group), record it
#   nohang-action SCOPE RECORDER SPOOL JOBS MARKS killed PID NAME   nohang's post_kill_exe: the victim got
#                     SIGKILL; record it unless it was already counted by its SIGTERM (an escalation is one
#                     victim, logged, not counted twice)
# SCOPE is group (earlyoom.kill_process_group) or process; RECORDER the guard-record program, SPOOL the
# directory it writes events into, JOBS the GPU ranking agent's jobs file, MARKS where SIGTERMs are marked
# (outside the spool: its path unit fires while the spool is not empty).
# nohang runs it without a shell (shlex-split, $PID/$NAME substituted) and kills it after exe_timeout:
# the record (the same event file earlyoom's -N hook writes, written once the victim is gone) runs
# detached, so one collector feeds the journal line and the kill counter, once per job.
set -u
if [ "$#" -lt 7 ]; then
  echo "usage: nohang-action group|process RECORDER SPOOL JOBS MARKS term|killed PID [NAME]" >&2
  exit 2
fi
scope=$1 recorder=$2 spool=$3 jobs=$4 marks=$5
shift 5
case "$scope" in group|process) ;; *) echo "sparkguard-guard: unknown scope '$scope'" >&2; exit 2 ;; esac
action=$1
pid=$(printf '%s' "$2" | tr -cd '0-9')
[ -n "$pid" ] || { echo "sparkguard-guard: no pid given to '$action'" >&2; exit 2; }
record() {
  "$recorder" "$spool" "$jobs" "$pid" "$2" "$1" "$3" </dev/null >/dev/null 2>&1 &
}
case "$action" in
  term)
    name=$(cat "/proc/$pid/comm" 2>/dev/null || echo unknown)
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    if [ "$scope" = group ]; then
      pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -cd '0-9')
      # procps kill: the shell builtin of dash cannot signal a group.
      if [ -n "$pgid" ] && [ "$pgid" != 1 ]; then /bin/kill -TERM -- "-$pgid"; else kill -TERM "$pid"; fi || exit 1
    else
      kill -TERM "$pid" || exit 1
    fi
    : > "$marks/term-$pid"
    record "${uid:-}" "$name" SIGTERM
    echo "sparkguard: nohang sent SIGTERM to $name (pid $pid, uid ${uid:-?})" >&2
    ;;
  killed)
    shift 2
    name=$(printf '%s' "$*" | cut -c1-15)
    if [ -e "$marks/term-$pid" ]; then
      rm -f "$marks/term-$pid"
      echo "sparkguard: nohang escalated to SIGKILL for ${name:-?} (pid $pid); counted at its SIGTERM" >&2
    else
      record "" "${name:-unknown}" SIGKILL
      echo "sparkguard: nohang sent SIGKILL to ${name:-?} (pid $pid)" >&2
    fi
    ;;
  *) echo "sparkguard-guard: unknown action '$action'" >&2; exit 2 ;;
esac
