#!/usr/bin/env bash
# sparkguard developer entry point. As root on a fresh Debian/Ubuntu machine:
#
#   ./dev.sh quickstart   install everything, boot a local sandbox node, apply the site, audit it (the report)
#   ./dev.sh test         install everything, run the full test suite (what .ci/run runs): unit tier first,
#                         then sandbox nodes and qemu VMs on every core, then the memory replays alone; a failed unit
#                         test stops it there (--all-tiers: go on)
#   ./dev.sh test --fast  ruff, mypy and the unit tier only (tests/unit and the doctests): no node boots
#   ./dev.sh test -m sandbox / -m vm / -k ROLE   one tier, or the tests whose names mention a role
#   ./dev.sh install      only install (apt packages, .venv, promtool)
#
# Nothing here changes the host's swap, sysctls or services: promtool is
# unpacked from Debian's prometheus package instead of installing (and starting)
# a Prometheus server on the host.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
REPO=$PWD
VENV=$REPO/.venv
TOOLS=$REPO/.tools

APT_PACKAGES=(
  python3 python3-venv python3-pip       # the venv sparkguard and pyinfra run from
  debootstrap systemd-container          # sandbox nodes: Debian rootfs + systemd-nspawn
  openssh-client                         # ssh-keygen for sandbox keys
  qemu-system-x86                        # VM tests that need the node's own kernel
  qemu-user-static                       # arm64 sandbox nodes (sandbox up --arch arm64: user-space emulation)
  ca-certificates iproute2 util-linux procps
  git zsh                                # the wheel and init tests (git), the zsh completion test
)

log() { printf '==> %s\n' "$*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "dev.sh: run as root (sandbox nodes need debootstrap and systemd-nspawn)" >&2
    exit 1
  fi
}

install_promtool() {
  # promtool from Debian's prometheus package, without installing the package:
  # a package install would start a Prometheus server on this machine.
  if [ -x "$TOOLS/prometheus/usr/bin/promtool" ]; then return; fi
  log "unpacking promtool from Debian's prometheus package"
  local tmp; tmp=$(mktemp -d); chmod 755 "$tmp"; chown _apt "$tmp" 2>/dev/null || true
  (cd "$tmp" && apt-get download -qq prometheus)
  mkdir -p "$TOOLS/prometheus"
  dpkg-deb -x "$tmp"/prometheus_*.deb "$TOOLS/prometheus"
  rm -rf "$tmp"
}

install_amtool() {
  # amtool from Debian's prometheus-alertmanager package, unpacked the same way (no Alertmanager on the host):
  # the tests check rendered alertmanager.yml with it, as apply does on the node.
  if [ -x "$TOOLS/alertmanager/usr/bin/amtool" ]; then return; fi
  log "unpacking amtool from Debian's prometheus-alertmanager package"
  local tmp; tmp=$(mktemp -d); chmod 755 "$tmp"; chown _apt "$tmp" 2>/dev/null || true
  (cd "$tmp" && apt-get download -qq prometheus-alertmanager)
  mkdir -p "$TOOLS/alertmanager"
  dpkg-deb -x "$tmp"/prometheus-alertmanager_*.deb "$TOOLS/alertmanager"
  rm -rf "$tmp"
}

install() {
  need_root
  log "apt-get update"
  apt-get update -qq
  log "installing: ${APT_PACKAGES[*]%%#*}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    $(printf '%s\n' "${APT_PACKAGES[@]}" | sed 's/#.*//') >/dev/null
  install_promtool
  install_amtool
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  log "installing sparkguard (editable) and pinned dependencies"
  "$VENV/bin/pip" install -q --disable-pip-version-check -e ".[test]" 2>&1 | grep -v "^WARNING: Location" || true
  "$VENV/bin/python" -c "import sparkguard, pyinfra" 
  ln -sf "$TOOLS/prometheus/usr/bin/promtool" "$VENV/bin/promtool"
  ln -sf "$TOOLS/alertmanager/usr/bin/amtool" "$VENV/bin/amtool"
}

quickstart() {
  install
  export PATH="$VENV/bin:$PATH"
  log "booting a local sandbox node (systemd-nspawn; the first run builds a Debian rootfs, ~1 minute)"
  local inventory; inventory=$(sparkguard sandbox up --nodes 1 | tail -n 1)
  log "applying deploy/site.py to $inventory"
  sparkguard apply "$inventory"
  log "second apply: must change nothing"
  sparkguard apply "$inventory"
  log "report: every protection, checked on the node (sparkguard audit)"
  sparkguard audit "$inventory"
  cat >&2 <<TXT

The sandbox node keeps running. Try: sparkguard sandbox status; ssh into it with
  ssh -i /var/lib/sparkguard/sandbox/ssh/id_ed25519 -o UserKnownHostsFile=/var/lib/sparkguard/sandbox/known_hosts root@127.0.10.1
Stop it with: $VENV/bin/sparkguard sandbox down
To call sparkguard by name: export PATH="$VENV/bin:\$PATH"
TXT
}

# Run pytest; a run that collected nothing (exit 5) is a failure, not a pass.
pytest_run() {
  "$VENV/bin/python" -m pytest -q "$@"
  local rc=$?
  if [ "$rc" = 5 ]; then
    echo "dev.sh: pytest collected no tests; that is a failure, not a pass" >&2
    rc=1
  fi
  return "$rc"
}

# The node tiers in two phases. First every sandbox and VM test but the replays, on pytest-xdist workers
# (at least two), a group at a time: tests/node_groups.py keeps the tests that share a booted node in one
# worker, hands out the heaviest group first, and a free worker takes the next, so neither core idles while
# the other has a queue. VMs and sandbox nodes share only the host's CPUs here; none of these tests sizes
# anything from the host's memory. Meanwhile the images only the replays use are built (tests/prepare_images.py),
# so that the replays never wait for one. Then the replays (pyproject's "replay" marker) alone: their lines
# come from the host's MemAvailable, which a VM booting or stopping beside them would move.
node_tiers() {
  local workers; workers=$(nproc); [ "$workers" -ge 2 ] || workers=2
  local images_log; images_log=$(mktemp /tmp/sparkguard-images.XXXXXX.log)
  "$VENV/bin/python" -m tests.prepare_images >"$images_log" 2>&1 &
  local images_pid=$!
  # A background job ignores Ctrl-C: stop it with the run.
  trap 'kill -TERM "$images_pid" 2>/dev/null' INT TERM
  log "sandbox and VM tiers, replays left out, on $workers workers (one group of tests sharing a node at a time)"
  pytest_run -p no:cacheprovider -n "$workers" --dist loadgroup --no-loadscope-reorder -m "(sandbox or vm) and not replay" --durations=20 --durations-min=20 "$@"
  local nodes=$?
  wait "$images_pid" || log "building the replays' images beside the first phase failed: the replays build them"
  trap - INT TERM
  cat "$images_log" >&2
  rm -f "$images_log"
  log "memory replays, sandbox and VM, alone on the machine"
  pytest_run -m replay --durations=15 --durations-min=20 "$@"
  local replays=$?
  for phase in "sandbox and VM:$nodes" "replays:$replays"; do
    [ "${phase#*:}" = 0 ] || { echo "dev.sh: the ${phase%%:*} phase failed (exit ${phase#*:})" >&2; return 1; }
  done
}

run_tests() {
  local fast=0 all_tiers=0
  local args=()
  for arg in "$@"; do
    case "$arg" in
      --fast) fast=1 ;;
      --all-tiers) all_tiers=1; args+=("$arg") ;;
      *) args+=("$arg") ;;
    esac
  done
  install
  export PATH="$VENV/bin:$PATH"
  log "lint (ruff) and types (mypy)"
  set +e
  "$VENV/bin/ruff" check .
  local lint=$?
  "$VENV/bin/mypy"
  local types=$?
  local rc
  # The unit tier (tests/unit and the doctests: no node, nothing shared) on every core, first; then the
  # node tiers (node_tiers: memory replays need the machine to themselves). The slowest steps are
  # listed after each: where the suite's time goes, in every CI log. Arguments other than --fast and
  # --all-tiers (a file, -k, -m) make it one plain pytest run of what they pick.
  if [ "$fast" = 1 ] || [ "${#args[@]}" = 0 ] || [ "${args[*]}" = --all-tiers ]; then
    log "unit tier on $(nproc) cores"
    local picked=()
    [ "$fast" = 1 ] && picked=("${args[@]}")
    pytest_run -n "$(nproc)" -m unit --durations=10 --durations-min=5 "${picked[@]}"
    rc=$?
    if [ "$fast" = 0 ]; then
      if [ "$rc" != 0 ] && [ "$all_tiers" = 0 ]; then
        echo "dev.sh: the unit tier failed, so the sandbox and VM tiers were not run (--all-tiers runs them anyway)" >&2
      else
        node_tiers "${args[@]}"
        local nodes=$?
        [ "$rc" = 0 ] && rc=$nodes
      fi
    fi
  else
    log "pytest ${args[*]}"
    pytest_run --durations=25 --durations-min=20 "${args[@]}"
    rc=$?
  fi
  set -e
  if [ "$rc" = 0 ] && { [ "$lint" != 0 ] || [ "$types" != 0 ]; }; then
    echo "dev.sh: the tests passed, but ruff (exit $lint) or mypy (exit $types) did not" >&2
    exit 1
  fi
  exit "$rc"
}

case "${1:-}" in
  quickstart) quickstart ;;
  test) shift; run_tests "$@" ;;
  install) install ;;
  *) sed -n '2,14p' "$0" >&2; exit 2 ;;
esac
