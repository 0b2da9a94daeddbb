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
# "STATE STARTTIME" of a process from /proc/PID/stat (after the comm, which may hold spaces or ')').
state_of() {
  sed -n 's/^.*) \([A-Za-z]\) \([^ ]* \)\{18\}\([0-9]*\) .*$/\1 \3/p' "/proc/$1/stat" 2>/dev/null
}
job_of() {
  awk -v p="$1" '$1 == p { print $3; exit }' "$jobs" 2>/dev/null
}
# nohang takes a victim for dead once its memory map is gone (RSS 0) and it is no longer running, while the
# kernel may still be freeing that memory (a GPU driver releasing a job's memory takes longer still). It then
# reads MemAvailable, finds it still under the line, and signals the next victim: the replays saw the vLLM
# stand-in signalled 22 ms after the trainer "died". (earlyoom 1.7 waits until its victim is reaped.)
# The memory of a victim signalled in the last minute is still coming back while that victim is there
# (same start time, not a zombie) and for a second after its signal. Prints the first such victim of
# another job than PID's ($mine) as "VICTIM THERE" (yes or no), or nothing.
releasing() {
  for mark in $(find "$marks" -maxdepth 1 -name 'term-*' -mmin -1 2>/dev/null); do
    other=${mark##*/term-}
    [ "$other" != "$pid" ] || continue
    start= at=
    read -r start at < "$mark" 2>/dev/null
    case "$at" in ''|*[!0-9]*) continue ;; esac
    if [ -n "$mine" ] && [ "$(job_of "$other")" = "$mine" ]; then continue; fi
    there=no
    now=$(state_of "$other")
    case "$now" in Z*|X*|'') ;; *) [ "${now#* }" != "$start" ] || there=yes ;; esac
    if [ "$there" = yes ] || [ $(( $(date +%s%3N) - at )) -lt 1000 ]; then
      echo "$other $there"
      return
    fi
  done
}
case "$action" in
  term)
    name=$(cat "/proc/$pid/comm" 2>/dev/null || echo unknown)
    uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    start=$(state_of "$pid")
    start=${start#* }
    mine=$(job_of "$pid")
    busy=$(releasing)
    if [ -n "$busy" ]; then
      # Signal nobody while an earlier victim's memory is still coming back: nohang reads memory again, and
      # asks again (for the same process: it keeps a victim that did not respond) if it is still low. One
      # action waits, at most 5 s, while that victim is still there; a victim that outlives the wait does
      # not hold the next one back.
      earlier=${busy%% *}
      exec 9>>"$marks/.releasing.lock"
      if flock -n 9; then
        waited=0
        while [ "${busy##* }" = yes ] && [ "$waited" -lt 50 ]; do
          sleep 0.1
          waited=$((waited + 1))
          busy=$(releasing)
        done
      else
        busy="${busy% *} waited-for"
      fi
      if [ "${busy##* }" != yes ]; then
        echo "sparkguard: nohang chose $name (pid $pid) while the memory of pid $earlier, signalled" \
             "before it, was still coming back; not signalled: nohang checks memory again" >&2
        exit 0
      fi
      exec 9>&-
    fi
    if [ "$scope" = group ]; then
      pgid=$(ps -o pgid= -p "$pid" 2>/dev/null | tr -cd '0-9')
      # procps kill: the shell builtin of dash cannot signal a group.
      if [ -n "$pgid" ] && [ "$pgid" != 1 ]; then /bin/kill -TERM -- "-$pgid"; else kill -TERM "$pid"; fi || exit 1
    else
      kill -TERM "$pid" || exit 1
    fi
    echo "${start:-0} $(date +%s%3N)" > "$marks/term-$pid"
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
