#!/bin/sh
# Managed by sparkguard (role base): validate a sysctl.d candidate before it
# replaces the live file. Every key must exist in this kernel and every line
# must be "key = value"; a typo is caught here, not silently ignored at boot.
set -u
status=0
while IFS= read -r line || [ -n "$line" ]; do
  case "$line" in ''|'#'*|';'*) continue ;; esac
  key=$(printf '%s' "${line%%=*}" | tr -d ' \t')
  value=$(printf '%s' "${line#*=}" | sed 's/^[ \t]*//')
  case "$line" in *=*) ;; *) echo "not 'key = value': $line" >&2; status=1; continue ;; esac
  if [ ! -e "/proc/sys/$(printf '%s' "$key" | tr . /)" ]; then
    echo "unknown sysctl: $key" >&2; status=1
  fi
  [ -n "$value" ] || { echo "empty value for $key" >&2; status=1; }
done < "$1"
exit "$status"
