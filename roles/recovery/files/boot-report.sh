#!/bin/sh
# Managed by sparkguard (role recovery): the unclean-boot report. Shipped as it is; its unit passes the values:
#   boot-report start|stop --marker FILE --verdict FILE --textfile FILE --last FILE
#               --earlyoom-lines N --memory-samples N
#   start: a marker left over from the previous boot means it never shut down
#          cleanly; write a short summary of its last minutes to the journal
#          (identifier sparkguard-boot-report), to the --last file
#          and sparkguard_previous_boot_unclean 0/1 to the textfile metrics;
#          then create the marker for this boot.
#   stop:  clean shutdown: remove the marker.
# The verdict is kept in /run for the length of the boot, so a restart of the
# unit (apply) never turns an unclean verdict into a clean one.
set -u
TAG=sparkguard-boot-report
usage() {
  echo "usage: boot-report start|stop --marker FILE --verdict FILE --textfile FILE --last FILE" \
       "--earlyoom-lines N --memory-samples N" >&2
  exit 2
}
action=${1:-}; [ $# -gt 0 ] && shift
MARKER="" VERDICT="" TEXTFILE="" LAST="" EARLYOOM_LINES="" MEMORY_SAMPLES=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --marker) MARKER=$2 ;;
    --verdict) VERDICT=$2 ;;
    --textfile) TEXTFILE=$2 ;;
    --last) LAST=$2 ;;
    --earlyoom-lines) EARLYOOM_LINES=$2 ;;
    --memory-samples) MEMORY_SAMPLES=$2 ;;
    *) usage ;;
  esac
  shift 2
done
for value in "$MARKER" "$VERDICT" "$TEXTFILE" "$LAST"; do
  case "$value" in /*) ;; *) usage ;; esac
done
for value in "$EARLYOOM_LINES" "$MEMORY_SAMPLES"; do
  case "$value" in ''|*[!0-9]*) usage ;; esac
done

summary() {
  echo "previous boot ended uncleanly (no clean shutdown recorded; its boot id: $(cat "$MARKER" 2>/dev/null))"
  if ! journalctl -b -1 -n 0 --no-pager >/dev/null 2>&1; then
    echo "no journal of the previous boot on disk (was the journal persistent then?)"
    return 0
  fi
  echo "last earlyoom lines of the previous boot:"
  journalctl -b -1 -u earlyoom.service -u nohang.service -o short-iso --no-pager 2>/dev/null | grep -v '^-- ' | tail -n "$EARLYOOM_LINES" | sed 's/^/  /'
  echo "last MemAvailable samples of the previous boot:"
  journalctl -b -1 -o short-iso --no-pager 2>/dev/null | grep -i 'mem avail' | tail -n "$MEMORY_SAMPLES" | sed 's/^/  /'
  echo "last lines of the previous boot:"
  journalctl -b -1 -o short-iso --no-pager 2>/dev/null | grep -v '^-- ' | tail -n 5 | sed 's/^/  /'
}

metric() {
  mkdir -p "$(dirname "$TEXTFILE")"
  {
    echo "# HELP sparkguard_previous_boot_unclean 1 when the boot before this one ended without a clean shutdown."
    echo "# TYPE sparkguard_previous_boot_unclean gauge"
    echo "sparkguard_previous_boot_unclean $1"
  } > "$TEXTFILE.tmp" && mv -f "$TEXTFILE.tmp" "$TEXTFILE"
}

case "$action" in
  start)
    mkdir -p "$(dirname "$VERDICT")"
    if [ -f "$VERDICT" ]; then
      unclean=$(cat "$VERDICT")
    else
      unclean=0
      if [ -f "$MARKER" ]; then
        unclean=1
        summary > "$LAST.tmp" 2>&1
        mv -f "$LAST.tmp" "$LAST"
        systemd-cat -t "$TAG" -p warning < "$LAST"
      else
        echo "previous boot ended cleanly (or is the first with sparkguard)" | systemd-cat -t "$TAG" -p info
      fi
      echo "$unclean" > "$VERDICT"
    fi
    metric "$unclean"
    cat /proc/sys/kernel/random/boot_id > "$MARKER.tmp" && mv -f "$MARKER.tmp" "$MARKER"
    sync
    ;;
  stop)
    rm -f "$MARKER"
    sync
    ;;
  *)
    usage
    ;;
esac
