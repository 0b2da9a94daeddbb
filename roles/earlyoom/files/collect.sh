#!/bin/sh
# Managed by sparkguard (role earlyoom, shipped as it is: roles/earlyoom/files/collect.sh). Turns the guard's kill
# events into one journal line each and the Prometheus textfile counters
#   sparkguard_earlyoom_kills_total{victim="NAME"}
#   sparkguard_earlyoom_kills_all_total
# The second exists from the start at 0, so increase() sees the very first kill.
#   collect.sh GUARD SPOOL COUNTS TEXTFILE MARKS
# GUARD is earlyoom or nohang; SPOOL the directory the guard's hook writes events into; COUNTS the
# "COUNT NAME" lines that survive reboots; TEXTFILE the .prom file node_exporter reads; MARKS nohang's
# SIGTERM marks (sparkguard-earlyoom-kills.service passes them; role earlyoom owns every path).
set -eu
if [ "$#" -ne 5 ]; then
  echo "usage: collect.sh GUARD SPOOL COUNTS TEXTFILE MARKS" >&2
  exit 2
fi
case "$1" in earlyoom|nohang) guard=$1 ;; *) echo "collect.sh: unknown guard '$1'" >&2; exit 2 ;; esac
spool=$2
counts=$3
# "EPOCH PID START JOB" of the kills of the last 10 minutes: what makes a kill count once.
recent=$3.recent
out=$4
marks=$5
umask 022
touch "$counts" "$recent"
# The spool is writable by the guard (earlyoom's dynamic user, or root for nohang) and, being
# mode 1733, creatable by anyone: only a regular file (no FIFO, no link) written by root or by a
# systemd dynamic user (UIDs 61184-65519) counts; anything else is logged and removed, and is
# never opened for reading (a FIFO would block this script and with it the guard's start).
# A young *.tmp (a write in progress) is left only when it is such a file: any other owner's is removed.
find "$spool" -maxdepth 1 -name '*.tmp' -mmin +1 -delete 2>/dev/null || true
for entry in "$spool"/* "$spool"/.[!.]*; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  owner=$(stat -c %u -- "$entry" 2>/dev/null || echo -1)
  case "$owner" in ''|*[!0-9]*) owner=-1 ;; esac
  trusted=no
  if [ "$owner" -eq 0 ] || { [ "$owner" -ge 61184 ] && [ "$owner" -le 65519 ]; }; then trusted=yes; fi
  [ -f "$entry" ] && [ ! -L "$entry" ] || trusted=no
  case "$entry" in
    *.event) ;;
    *.tmp) [ "$trusted" = yes ] && continue ;;  # the guard's write in progress
    *) trusted=no ;;
  esac
  if [ "$trusted" = no ]; then
    logger -t sparkguard-earlyoom -p daemon.warning "ignored and removed $(basename -- "$entry") in $spool (owner uid $owner): not an event from the guard"
    rm -rf -- "$entry"
    continue
  fi
  event=$entry
  field() { head -c 4096 -- "$event" | sed -n "s/^$1=//p" | head -n 1 | tr -cd "$2" | cut -c1-"$3"; }
  name=$(field name 'A-Za-z0-9_.:/@+-' 15)
  pid=$(field pid '0-9' 10)
  start=$(field start '0-9' 20)
  job=$(field job '0-9:' 32)
  unit=$(field unit 'A-Za-z0-9_.:@\\-' 128)
  jobname=$(field jobname 'A-Za-z0-9_.:/@+-' 15)
  gone=$(field gone 'a-z' 3)
  name=${name:-unknown}
  now=$(date +%s)
  # Once per victim and once per job: the same PID (start times equal, or one unknown) or the same
  # job within 10 minutes is the same kill (a SIGTERM round repeated on a PID 1 that ignores it, an
  # escalation to SIGKILL, the next worker of a job whose memory was still held).
  duplicate=$(awk -v now="$now" -v p="${pid:-x}" -v s="$start" -v j="$job" '
    now - $1 <= 600 && (($2 == p && ($3 == s || $3 == "-" || s == "")) || (j != "" && $4 == j)) { print "yes"; exit }
  ' "$recent" 2>/dev/null)
  label=${jobname:-$name}
  of=""
  [ -n "$job" ] && of=" of job ${unit:-$job} ($label)"
  [ "$gone" = no ] && of="$of, still alive after 60 s"
  if [ -n "$duplicate" ]; then
    logger -t sparkguard-earlyoom -p daemon.info "$guard signalled $name (pid ${pid:-?})$of: same victim or job as a kill already counted"
  else
    logger -t sparkguard-earlyoom -p daemon.warning "$guard killed $name (pid ${pid:-?})$of; see: journalctl -u $guard"
    awk -v n="$label" '$2 == n { $1++; found = 1 } { print } END { if (!found) print 1, n }' "$counts" > "$counts.tmp"
    mv "$counts.tmp" "$counts"
  fi
  { awk -v now="$now" 'now - $1 <= 600' "$recent" 2>/dev/null; echo "$now ${pid:-x} ${start:--} $job"; } > "$recent.tmp"
  mv "$recent.tmp" "$recent"
  rm -f "$event"
done
# SIGTERM marks of the nohang guard whose victim exited without needing SIGKILL.
find "$marks" -maxdepth 1 -name 'term-*' -mmin +60 -delete 2>/dev/null || true
{
  echo "# HELP sparkguard_guard_info The low-memory guard this node runs (earlyoom or nohang)."
  echo "# TYPE sparkguard_guard_info gauge"
  echo "sparkguard_guard_info{guard=\"$guard\"} 1"
  echo "# HELP sparkguard_earlyoom_kills_all_total Processes killed by the low-memory guard (earlyoom or nohang) on this node (all victims)."
  echo "# TYPE sparkguard_earlyoom_kills_all_total counter"
  awk '{ s += $1 } END { print "sparkguard_earlyoom_kills_all_total", s + 0 }' "$counts"
  echo "# HELP sparkguard_earlyoom_kills_total Processes killed by the low-memory guard (earlyoom or nohang), by victim process name (comm)."
  echo "# TYPE sparkguard_earlyoom_kills_total counter"
  awk '{ printf "sparkguard_earlyoom_kills_total{victim=\"%s\"} %d\n", $2, $1 }' "$counts"
} > "$out.tmp"
mv "$out.tmp" "$out"
