#!/bin/sh
# Managed by sparkguard (role swap): shipped as it is; its callers (units, apply's checks) pass the values.
#
#   swap-toggle off [--record FILE] [--reserve-percent N]
#                                     turn every active swap off; FILE remembers them for `on`
#   swap-toggle on  [--record FILE]   turn back on exactly what FILE recorded (or everything in fstab)
#   swap-toggle fstab-active [--training-target UNIT]
#                                     exit 0 when every fstab swap is on (or training mode holds it off)
#   swap-toggle none-active           exit 0 when no swap is on
#
# swapoff must move every swapped page back into RAM. When swap holds more than
# MemAvailable minus earlyoom's SIGTERM reserve (N% of MemTotal),
# it would fail with ENOMEM half-way or push the node into the very squeeze
# training mode exists to avoid, so `off` refuses up front and changes nothing.
# If a swapoff still fails, the swaps already turned off are turned back on.
set -u

meminfo() { awk -v k="$1:" '$1 == k { print $2 }' /proc/meminfo; }
active() { tail -n +2 /proc/swaps | awk '{ print $1, $5 }'; }
log() { echo "sparkguard swap-toggle: $*" >&2; }

swap_off() {
  record=$1
  list=$(active)
  [ -n "$record" ] && { mkdir -p "$(dirname "$record")"; printf '%s\n' "$list" | sed '/^$/d' > "$record.tmp"; }
  if [ -z "$list" ]; then
    [ -n "$record" ] && mv "$record.tmp" "$record"
    return 0
  fi
  used=$(( $(meminfo SwapTotal) - $(meminfo SwapFree) ))
  avail=$(meminfo MemAvailable)
  reserve=$(( $(meminfo MemTotal) * RESERVE_PERCENT / 100 ))
  if [ $(( used + reserve )) -gt "$avail" ]; then
    log "refusing to turn swap off: swap holds $(( used / 1024 )) MiB, MemAvailable is $(( avail / 1024 )) MiB," \
        "and $(( reserve / 1024 )) MiB must stay free above the earlyoom SIGTERM line. Swap was left as it is." \
        "Free memory (stop serving or other jobs) and try again."
    [ -n "$record" ] && rm -f "$record.tmp"
    return 1
  fi
  done_list=""
  for dev in $(printf '%s\n' "$list" | awk '{ print $1 }'); do
    if swapoff "$dev"; then
      done_list="$done_list $dev"
    else
      log "swapoff $dev failed; turning back on what was already off:$done_list. Swap is as it was."
      printf '%s\n' "$list" | while read -r d prio; do
        case " $done_list " in *" $d "*) restore_one "$d" "$prio" ;; esac
      done
      [ -n "$record" ] && rm -f "$record.tmp"
      return 1
    fi
  done
  [ -n "$record" ] && mv "$record.tmp" "$record"
  log "swap off:$done_list"
}

restore_one() {
  dev=$1 prio=$2
  grep -q "^$dev " /proc/swaps && return 0
  if [ "${prio#-}" = "$prio" ]; then swapon -p "$prio" "$dev"; else swapon "$dev"; fi
}

swap_on() {
  record=$1
  if [ -n "$record" ]; then
    [ -f "$record" ] || return 0
    status=0
    while read -r dev prio; do
      [ -n "$dev" ] || continue
      restore_one "$dev" "$prio" || { log "could not turn $dev back on"; status=1; }
    done < "$record"
    [ "$status" -eq 0 ] && rm -f "$record"
    log "swap restored: $(active | awk '{ printf "%s ", $1 }')"
    return "$status"
  fi
  systemctl start swap.target 2>/dev/null
  swapon -a
}

fstab_active() {
  [ -n "$TRAINING_TARGET" ] && systemctl is-active --quiet "$TRAINING_TARGET" && return 0
  for dev in $(findmnt --fstab -t swap -n -o SOURCE --evaluate 2>/dev/null); do
    real=$(readlink -f "$dev")
    tail -n +2 /proc/swaps | awk '{ print $1 }' | grep -qx -e "$dev" -e "$real" || return 1
  done
  return 0
}

usage() {
  echo "usage: swap-toggle off|on [--record FILE] [--reserve-percent N] | fstab-active [--training-target UNIT]" \
       "| none-active" >&2
  exit 2
}

cmd=${1:-}; [ $# -gt 0 ] && shift
record="" RESERVE_PERCENT=0 TRAINING_TARGET=""
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --record) record=$2 ;;
    --reserve-percent) RESERVE_PERCENT=$2 ;;
    --training-target) TRAINING_TARGET=$2 ;;
    *) usage ;;
  esac
  shift 2
done
case "$RESERVE_PERCENT" in ''|*[!0-9]*) usage ;; esac
case "$cmd" in
  off) swap_off "$record" ;;
  on) swap_on "$record" ;;
  fstab-active) fstab_active ;;
  none-active) [ -z "$(active)" ] ;;
  *) usage ;;
esac
