#!/bin/sh
# Managed by sparkguard (role earlyoom): record one victim of the low-memory guard, once it is gone.
#
#   guard-record SPOOL JOBS PID NAME UID SIGNAL
#
# Called by earlyoom's -N hook and by nohang's action script, as the guard's user. It waits while
# the victim (the same PID with the same start time) still lives, at most 60 s, and only then drops
# one event file into SPOOL for the root collector: earlyoom 1.7 runs its hook whatever the kill
# returned, so a container's PID 1 that ignores SIGTERM would otherwise be "killed" again every 10 s.
# The event names the victim's job from JOBS, the GPU ranking agent's list of every process of
# every GPU job ("PID START JOB UNIT NAME" lines, kept a while after a job is gone): a kill of a
# forked worker or of the launcher counts for the job, once (the collector deduplicates).
set -u
spool=$1 jobs=$2 name=$4 signal=$6
pid=$(printf '%s' "$3" | tr -cd '0-9')
uid=$(printf '%s' "$5" | tr -cd '0-9')
[ -n "$pid" ] || { echo "sparkguard-guard: no pid to record" >&2; exit 2; }

# "STATE STARTTIME" of a process from /proc/PID/stat (after the comm, which may hold spaces or ')').
state_of() {
  sed -n 's/^.*) \([A-Za-z]\) \([^ ]* \)\{18\}\([0-9]*\) .*$/\1 \3/p' "/proc/$1/stat" 2>/dev/null
}

start=
now=$(state_of "$pid")
case "$now" in Z*|X*|'') ;; *) start=${now#* } ;; esac
waited=0
if [ -n "$start" ]; then
  while [ "$waited" -lt 600 ]; do
    now=$(state_of "$pid")
    case "$now" in Z*|X*|'') break ;; esac
    [ "${now#* }" = "$start" ] || break
    sleep 0.1
    waited=$((waited + 1))
  done
fi
gone=yes
[ "$waited" -lt 600 ] || gone=no
# The job: the agent's line for this PID (with this start time when it is known).
line=$(awk -v p="$pid" -v s="$start" '$1 == p && (s == "" || $2 == s) { print; exit }' "$jobs" 2>/dev/null)
job=$(printf '%s' "$line" | awk '{ print $3 }')
unit=$(printf '%s' "$line" | awk '{ print $4 }')
jobname=$(printf '%s' "$line" | awk '{ print $5 }')
event="$spool/$(date +%s).$$.event"
printf 'pid=%s\nstart=%s\nuid=%s\nname=%s\nsignal=%s\ngone=%s\njob=%s\nunit=%s\njobname=%s\n' \
  "$pid" "$start" "$uid" "$name" "$signal" "$gone" "$job" "$unit" "$jobname" > "$event.tmp" && mv "$event.tmp" "$event"
