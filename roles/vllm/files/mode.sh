#!/bin/sh
# Managed by sparkguard (role vllm), shipped as it is. Run by sparkguard-vllm-training@NAME.service:
#   vllm-mode MODE_DIR CONFIG_DIR NAME enter|leave shrink|stop
# MODE_DIR holds NAME.mode (read by sparkguard-vllm@NAME.service and by sparkguard-train's preflight);
# CONFIG_DIR holds NAME.yaml and NAME.shared.yaml. The unit passes the role's paths.
# enter shrink: restart NAME with NAME.shared.yaml (blocks until the full-size server has exited);
# enter stop:   stop NAME, and keep it stopped until leave;
# leave:        back to NAME.yaml (does not wait: it runs while the target is stopping).
set -eu
[ $# -eq 5 ] || { echo "usage: vllm-mode MODE_DIR CONFIG_DIR NAME enter|leave shrink|stop" >&2; exit 2; }
mode_dir=$1 config_dir=$2 name=$3 action=$4 policy=$5
case "$mode_dir:$config_dir" in
  /*:/*) ;;
  *) echo "vllm-mode: MODE_DIR and CONFIG_DIR must be absolute paths: $mode_dir $config_dir" >&2; exit 2 ;;
esac
case "$name" in
  ''|*/*|.*) echo "vllm-mode: not a model name: $name" >&2; exit 2 ;;
esac
unit="sparkguard-vllm@$name.service"
mode_file="$mode_dir/$name.mode"
case "$action:$policy" in
  enter:shrink)
    mkdir -p "$mode_dir"
    printf 'SPARKGUARD_VLLM_MODE=shared\nSPARKGUARD_VLLM_CONFIG=%s/%s.shared.yaml\n' "$config_dir" "$name" > "$mode_file.tmp"
    mv -f "$mode_file.tmp" "$mode_file"
    systemctl try-restart "$unit"
    ;;
  enter:stop)
    mkdir -p "$mode_dir"
    printf 'SPARKGUARD_VLLM_MODE=stopped\n' > "$mode_file.tmp"
    mv -f "$mode_file.tmp" "$mode_file"
    systemctl stop "$unit"
    ;;
  leave:shrink)
    rm -f "$mode_file"
    systemctl --no-block try-restart "$unit"
    ;;
  leave:stop)
    rm -f "$mode_file"
    if systemctl -q is-enabled "$unit"; then systemctl --no-block start "$unit"; fi
    ;;
  *)
    echo "vllm-mode: unknown action/policy: $action $policy" >&2
    exit 2
    ;;
esac
