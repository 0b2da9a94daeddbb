#!/bin/sh
# Managed by sparkguard (role monitoring): node memory metrics for node_exporter's textfile
# collector, written atomically. Shipped as it is; its unit passes the values:
#   node-metrics --textfile FILE --training-target UNIT --unified auto|0|1 --device-profile NAME --swap-allowed 0|1
#   sparkguard_training_mode                 1 while the training target is active
#   sparkguard_swap_allowed_during_training  the swap policy from the inventory
#   sparkguard_unified_memory                1 on unified-memory nodes (declared device_profile)
#   sparkguard_memory_outside_cgroups_bytes  (MemTotal - MemAvailable) - memory cgroups account for
#   sparkguard_gpu_process_memory_bytes      per process, from nvidia-smi where it exists
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
    gpu_lines=$(printf '%s\n' "$apps" | awk -F', *' '
      NF >= 3 {
        pid = $1; mem = $NF; name = $2
        for (i = 3; i < NF; i++) name = name ", " $i
        gsub(/^ +| +$/, "", pid); gsub(/^ +| +$/, "", mem)
        if (pid !~ /^[0-9]+$/ || mem !~ /^[0-9]+$/) next
        gsub(/\\/, "\\\\", name); gsub(/"/, "\\\"", name)
        printf "sparkguard_gpu_process_memory_bytes{pid=\"%s\",process=\"%s\"} %.0f\n", pid, name, mem * 1048576
      }')
  fi
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
  echo "# HELP sparkguard_node_metrics_timestamp_seconds When these metrics were written."
  echo "# TYPE sparkguard_node_metrics_timestamp_seconds gauge"
  echo "sparkguard_node_metrics_timestamp_seconds $(date +%s)"
} > "$tmp" && mv -f "$tmp" "$out"
