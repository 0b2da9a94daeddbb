#!/bin/sh
# Managed by sparkguard (role monitoring): node memory metrics for node_exporter's textfile
# collector, written atomically. Shipped as it is; its unit passes the values:
#   node-metrics --textfile FILE --training-target UNIT --unified auto|0|1 --device-profile NAME --swap-allowed 0|1
#   sparkguard_training_mode                 1 while the training target is active
#   sparkguard_swap_allowed_during_training  the swap policy from the inventory
#   sparkguard_unified_memory                1 on unified-memory nodes (declared device_profile)
#   sparkguard_memory_outside_cgroups_bytes  (MemTotal - MemAvailable) - memory cgroups account for
#   sparkguard_gpu_process_memory_bytes      per process, from nvidia-smi where it exists
#   sparkguard_kernel_oom_kills_total        kernel OOM kills this boot, per victim (comm) and scope, from the
#   sparkguard_kernel_oom_last_kill_timestamp_seconds   kernel log in the journal; sparkguard_kernel_log_up
# SG_PROC, SG_CGROUP and SG_OUT override /proc, /sys/fs/cgroup and the output file (tests).
set -u
PATH=${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
proc=${SG_PROC:-/proc}
cgroup=${SG_CGROUP:-/sys/fs/cgroup}
textfile="" training_target="" unified="" device_profile="" swap_allowed=""
usage() {
  echo "usage: node-metrics --textfile FILE --training-target UNIT --unified auto|0|1 --device-profile NAME" \
       "--swap-allowed 0|1" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --textfile) textfile=$2 ;;
    --training-target) training_target=$2 ;;
    --unified) unified=$2 ;;
    --device-profile) device_profile=$2 ;;
    --swap-allowed) swap_allowed=$2 ;;
    *) usage ;;
  esac
  shift 2
done
case "$unified" in auto|0|1) ;; *) usage ;; esac
case "$swap_allowed" in 0|1) ;; *) usage ;; esac
case "$device_profile" in ''|*[!A-Za-z0-9_-]*) usage ;; esac
case "$training_target" in ''|*[!A-Za-z0-9_.@-]*) usage ;; esac
[ -n "$textfile" ] || usage
out=${SG_OUT:-$textfile}
tmp="$(dirname "$out")/.$(basename "$out").$$"
trap 'rm -f "$tmp"' EXIT
umask 022

kib() { awk -v k="$1:" '$1 == k { print $2; found = 1 } END { if (!found) print -1 }' "$proc/meminfo"; }
stat_file() { awk -v k="$2" '$1 == k { print $2; found = 1 } END { if (!found) print 0 }' "$1"; }

# awk: esc(s) is s as a label value of the text format. Process names are chosen by whoever starts the
# process: \ " and newline are escaped, and every byte that is not part of valid UTF-8, or is a control
# character, becomes U+FFFD (node_exporter refuses a textfile with invalid UTF-8, and with it every
# metric in it). Run it under LC_ALL=C, so that awk sees bytes.
label_value='
  function esc(s,    out, i, len, c, b, need, lo, hi, j, b2, ok) {
    if (!esc_ready) { for (i = 1; i < 256; i++) ord[sprintf("%c", i)] = i; esc_ready = 1 }
    out = ""; len = length(s); i = 1
    while (i <= len) {
      c = substr(s, i, 1); b = ord[c]
      if (c == "\\") { out = out "\\\\"; i++; continue }
      if (c == "\"") { out = out "\\\""; i++; continue }
      if (c == "\n") { out = out "\\n"; i++; continue }
      if (b < 32 || b == 127) { out = out "\357\277\275"; i++; continue }
      if (b < 128) { out = out c; i++; continue }
      need = 0; lo = 128; hi = 191
      if (b >= 194 && b <= 223) need = 1
      else if (b == 224) { need = 2; lo = 160 }
      else if ((b >= 225 && b <= 236) || b == 238 || b == 239) need = 2
      else if (b == 237) { need = 2; hi = 159 }
      else if (b == 240) { need = 3; lo = 144 }
      else if (b >= 241 && b <= 243) need = 3
      else if (b == 244) { need = 3; hi = 143 }
      ok = need > 0 && i + need <= len
      for (j = 1; ok && j <= need; j++) {
        b2 = ord[substr(s, i + j, 1)]
        if (b2 < (j == 1 ? lo : 128) || b2 > (j == 1 ? hi : 191)) ok = 0
      }
      if (ok) { out = out substr(s, i, need + 1); i += need + 1 } else { out = out "\357\277\275"; i++ }
    }
    return out
  }'

total_kib=$(kib MemTotal)
avail_kib=$(kib MemAvailable)

# What memory cgroups account for, without page cache (MemAvailable counts that as free too).
# v2: every top-level cgroup's memory.current minus its file LRU pages (kernel memory included).
# v1: the root's hierarchical usage minus its file LRU pages (anon + shmem of every process).
accounted=""
version=none
if [ -e "$cgroup/cgroup.controllers" ]; then
  version=v2
  accounted=0
  for dir in "$cgroup"/*/; do
    [ -r "$dir/memory.current" ] || continue
    current=$(cat "$dir/memory.current")
    file=$(awk '$1 == "active_file" || $1 == "inactive_file" { s += $2 } END { printf "%.0f", s }' "$dir/memory.stat" 2>/dev/null || echo 0)
    accounted=$(awk -v a="$accounted" -v c="$current" -v f="${file:-0}" 'BEGIN { printf "%.0f", a + c - f }')
  done
elif [ -r "$cgroup/memory/memory.usage_in_bytes" ]; then
  version=v1
  usage=$(cat "$cgroup/memory/memory.usage_in_bytes")
  active=$(stat_file "$cgroup/memory/memory.stat" total_active_file)
  inactive=$(stat_file "$cgroup/memory/memory.stat" total_inactive_file)
  accounted=$(awk -v u="$usage" -v a="$active" -v i="$inactive" 'BEGIN { printf "%.0f", u - a - i }')
fi

if [ "$unified" = auto ]; then
  # device_profile auto: GB10-style nvidia-smi (no memory total) or a Jetson device tree.
  unified=0
  if command -v nvidia-smi >/dev/null 2>&1 \
     && timeout 20 nvidia-smi --query-gpu=memory.total --format=csv,noheader 2>/dev/null | grep -qiE 'N/A|not supported'; then
    unified=1
  elif grep -qi jetson "$proc/device-tree/model" 2>/dev/null; then
    unified=1
  fi
fi

training=0
if systemctl is-active --quiet "$training_target" 2>/dev/null; then training=1; fi

gpu_up=0
gpu_lines=""
if command -v nvidia-smi >/dev/null 2>&1; then
  if apps=$(timeout 20 nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null); then
    gpu_up=1
    gpu_lines=$(printf '%s\n' "$apps" | LC_ALL=C awk -F', *' "$label_value"'
      NF >= 3 {
        pid = $1; mem = $NF; name = $2
        for (i = 3; i < NF; i++) name = name ", " $i
        gsub(/^ +| +$/, "", pid); gsub(/^ +| +$/, "", mem)
        if (pid !~ /^[0-9]+$/ || mem !~ /^[0-9]+$/) next
        printf "sparkguard_gpu_process_memory_bytes{pid=\"%s\",process=\"%s\"} %.0f\n", pid, esc(name), mem * 1048576
      }')
  fi
fi

# Kernel OOM kills of this boot, from the kernel's own lines (mm/oom_kill.c, printed at KERN_ERR):
#   Out of memory: Killed process PID (COMM) total-vm:...
#   Out of memory (oom_kill_allocating_task): Killed process PID (COMM) total-vm:...
#   Memory cgroup out of memory: Killed process PID (COMM) total-vm:...
# Read from the journal (the unit's ProtectKernelLogs= hides /dev/kmsg, and the ring buffer forgets), only
# this boot's kernel entries at priority err or above (journal indexes, not the whole log), at most 10 s.
# The probe tells "no kill" from "no kernel log to read" (no journal, Storage=none, a container).
# COMM is chosen by whoever starts the process (prctl PR_SET_NAME, up to 15 bytes): esc() makes it a
# label value, and it ends at the LAST ") total-vm:", so that a name such as "x) total-vm:9" stays
# whole. short-unix -a prints a non-UTF-8 message as it is (without -a: "[N blob data]"); a newline in
# COMM continues the entry on a line indented by the prefix's width. At most 32 victim series; further
# names count as "(other processes)", which no COMM can be (17 bytes). A failed or timed-out read
# exports sparkguard_kernel_log_up 0 and no series (never a count that went down).
kernel_oom="sparkguard_kernel_log_up 0"
if command -v journalctl >/dev/null 2>&1 \
   && [ -n "$(timeout 5 journalctl -k -b 0 -n 1 -q -o short-unix --no-pager 2>/dev/null)" ]; then
  kernel_oom=$({ SYSTEMD_COLORS=0 timeout 10 journalctl -k -b 0 -p err -q -a -o short-unix --no-pager 2>/dev/null
                 echo "#rc $?"; } | LC_ALL=C awk -v max=32 "$label_value"'
    BEGIN {
      rc = ""; n = 0; msg = ""; inmsg = 0
    }
    function flush(    scope, rest, pos, k, comm, key) {
      if (msg !~ /^(Out of memory|Memory cgroup out of memory)( \([^)]*\))?: Killed process [0-9]+ \(/) { msg = ""; return }
      scope = (msg ~ /^Memory cgroup/) ? "cgroup" : "node"
      match(msg, /: Killed process [0-9]+ \(/)
      rest = substr(msg, RSTART + RLENGTH)
      pos = 0
      while ((k = index(substr(rest, pos + 1), ") total-vm:")) > 0) pos += k
      if (pos == 0) while ((k = index(substr(rest, pos + 1), ")")) > 0) pos += k
      comm = pos ? substr(rest, 1, pos - 1) : rest
      msg = ""
      key = "victim=\"" esc(comm) "\",scope=\"" scope "\""
      if (!(key in count) && n >= max) key = "victim=\"(other processes)\",scope=\"" scope "\""
      if (!(key in count)) { order[++n] = key; count[key] = 0; last[key] = ts }
      count[key]++
      if (ts + 0 >= last[key] + 0) last[key] = ts
    }
    /^#rc / { flush(); inmsg = 0; rc = $2; next }
    /^[0-9]+\.[0-9]+ / {
      flush(); inmsg = 0
      if (match($0, /^[0-9]+\.[0-9]+ ([^ ]+ )?kernel: /)) { ts = $1; plen = RLENGTH; msg = substr($0, plen + 1); inmsg = 1 }
      next
    }
    inmsg && substr($0, 1, plen) ~ /^ *$/ { msg = msg "\n" substr($0, plen + 1); next }
    { flush(); inmsg = 0 }
    END {
      flush()
      if (rc != "0") { print "sparkguard_kernel_log_up 0"; exit }
      print "sparkguard_kernel_log_up 1"
      if (!n) exit
      print "# HELP sparkguard_kernel_oom_kills_total Kernel OOM kills this boot by victim (comm) and scope (node: the node ran out of memory, cgroup: a memory cgroup limit), from the kernel log."
      print "# TYPE sparkguard_kernel_oom_kills_total counter"
      for (i = 1; i <= n; i++) printf "sparkguard_kernel_oom_kills_total{%s} %d\n", order[i], count[order[i]]
      print "# HELP sparkguard_kernel_oom_last_kill_timestamp_seconds When the kernel last OOM-killed this victim this boot (journal time)."
      print "# TYPE sparkguard_kernel_oom_last_kill_timestamp_seconds gauge"
      for (i = 1; i <= n; i++) printf "sparkguard_kernel_oom_last_kill_timestamp_seconds{%s} %s\n", order[i], last[order[i]]
    }')
  [ -n "$kernel_oom" ] || kernel_oom="sparkguard_kernel_log_up 0"
fi

{
  echo "# HELP sparkguard_training_mode 1 while $training_target is active (swap must be off)."
  echo "# TYPE sparkguard_training_mode gauge"
  echo "sparkguard_training_mode $training"
  echo "# HELP sparkguard_swap_allowed_during_training 1 if this node may keep swap on while training (inventory)."
  echo "# TYPE sparkguard_swap_allowed_during_training gauge"
  echo "sparkguard_swap_allowed_during_training $swap_allowed"
  echo "# HELP sparkguard_unified_memory 1 on unified-memory nodes (GPU memory is host RAM), from the declared device_profile."
  echo "# TYPE sparkguard_unified_memory gauge"
  echo "sparkguard_unified_memory{device_profile=\"$device_profile\"} $unified"
  if [ -n "$accounted" ] && [ "$total_kib" -ge 0 ] && [ "$avail_kib" -ge 0 ]; then
    echo "# HELP sparkguard_memory_cgroup_accounted_bytes Memory charged to memory cgroups, without file pages."
    echo "# TYPE sparkguard_memory_cgroup_accounted_bytes gauge"
    echo "sparkguard_memory_cgroup_accounted_bytes{cgroup_version=\"$version\"} $accounted"
    echo "# HELP sparkguard_memory_outside_cgroups_bytes Used memory (MemTotal - MemAvailable) that no memory cgroup accounts for: GPU driver memory on unified-memory nodes."
    echo "# TYPE sparkguard_memory_outside_cgroups_bytes gauge"
    awk -v t="$total_kib" -v a="$avail_kib" -v c="$accounted" \
      'BEGIN { v = (t - a) * 1024 - c; if (v < 0) v = 0; printf "sparkguard_memory_outside_cgroups_bytes %.0f\n", v }'
  fi
  echo "# HELP sparkguard_nvidia_smi_up 1 if nvidia-smi answered the per-process query on this run."
  echo "# TYPE sparkguard_nvidia_smi_up gauge"
  echo "sparkguard_nvidia_smi_up $gpu_up"
  if [ -n "$gpu_lines" ]; then
    echo "# HELP sparkguard_gpu_process_memory_bytes GPU memory per process (nvidia-smi --query-compute-apps used_memory)."
    echo "# TYPE sparkguard_gpu_process_memory_bytes gauge"
    printf '%s\n' "$gpu_lines"
  fi
  echo "# HELP sparkguard_kernel_log_up 1 if this boot's kernel log could be read from the journal (names kernel OOM victims)."
  echo "# TYPE sparkguard_kernel_log_up gauge"
  printf '%s\n' "$kernel_oom"
  echo "# HELP sparkguard_node_metrics_timestamp_seconds When these metrics were written."
  echo "# TYPE sparkguard_node_metrics_timestamp_seconds gauge"
  echo "sparkguard_node_metrics_timestamp_seconds $(date +%s)"
} > "$tmp" && mv -f "$tmp" "$out"
