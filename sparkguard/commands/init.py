"""sparkguard init DIR: scaffold an operator's repository (inventory, pinned tool, review in CI).

An operator keeps the fleet's inventory in their own repository and reviews every change as a
pull request. ``init`` writes the starting point: ``inventory/NAME/hosts.yml`` with the node
profile filled in, ``group_vars/``, ``requirements.txt`` pinning this sparkguard, and one review
script that GitHub Actions and GitLab CI both run on a pull/merge request: validate, plan, render
the target branch and the change, and write the rendered diff (secrets show as ``<secret>``, since
render never writes them) for the CI job to post.

It never overwrites: an existing file is exit 2, naming it.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path

from .. import __version__, safe_write
from ..errors import ConfigError, Problem
from ..inventory import name_problem
from . import Subcommands

# MemTotal as the kernel reports it (GiB), where it is known per profile; others must be declared.
PROFILES: dict[str, float | None] = {"dgx-spark": 121.7, "gh200": None, "jetson": None, "amd-apu": None,
                                     "discrete": None, "cpu-only": None}


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("init", help="scaffold an operator repository: inventory, pinned sparkguard, CI review")
    parser.add_argument("directory", help="the repository to write into (created if missing)")
    parser.add_argument("--name", default="prod", help="inventory name: inventory/NAME (default prod)")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="dgx-spark", help="the nodes' device profile")
    parser.add_argument("--memory-total-gib", type=float, help="the nodes' MemTotal (default: the profile's)")
    parser.add_argument("--host", action="append", metavar="NAME=ADDRESS",
                        help="a node and its SSH address (repeatable; default: two documentation examples)")
    parser.add_argument("--ssh-user", default="ops", help="SSH user with passwordless sudo (default ops)")
    parser.set_defaults(func=run)


def _hosts(args: argparse.Namespace) -> list[tuple[str, str]]:
    pairs = args.host or ["spark-01=192.0.2.11", "spark-02=192.0.2.12"]
    hosts, problems = [], []
    for pair in pairs:
        name, _, address = pair.partition("=")
        reason = name_problem(name) or (None if address and " " not in address else "give NAME=ADDRESS")
        if reason:
            problems.append(Problem("", "--host", pair, reason))
        hosts.append((name, address))
    for value, field in ((args.name, "--name"), (args.ssh_user, "--ssh-user")):
        reason = name_problem(value)
        if reason:
            problems.append(Problem("", field, value, reason))
    if problems:
        raise ConfigError(problems)
    return hosts


def files(args: argparse.Namespace) -> dict[str, str]:
    """Relative path -> content of everything init writes."""
    memory = args.memory_total_gib if args.memory_total_gib is not None else PROFILES[args.profile]
    if memory is None:
        raise ConfigError([Problem("", "--memory-total-gib", None,
                                   f"profile {args.profile} has no known MemTotal: give the nodes' MemTotal in GiB "
                                   f"(`grep MemTotal /proc/meminfo`, divided by 1048576)")])
    hosts = _hosts(args)
    group = args.profile.replace("-", "_")
    host_lines = "\n".join(f"        {name}: {{ssh_host: {address}}}" for name, address in hosts)
    inventory = f"inventory/{args.name}"
    return {
        f"{inventory}/hosts.yml": textwrap.dedent(f"""\
            # sparkguard inventory ({args.profile} nodes). Every setting: sparkguard docs, or docs/settings.md upstream.
            #   sparkguard validate {inventory}     # schema check, no SSH
            #   sparkguard plan {inventory}         # each node's memory budget
            #   sparkguard apply {inventory} --dry  # what would change
            all:
              vars:
                ssh_user: {args.ssh_user}
                sudo: true
                ssh_key: ~/.ssh/id_ed25519
                ssh_host_key_checking: "yes"
              children:
                {group}:
                  vars:
                    node:
                      device_profile: {args.profile}
                      memory_total_gib: {memory}
                  hosts:
            """) + host_lines + "\n",
        f"{inventory}/group_vars/{group}.yml": textwrap.dedent(f"""\
            # Settings for every node in group {group} (host_vars/<host>.yml overrides per node).
            # Example: earlyoom's lines, as a share of MemTotal.
            # earlyoom:
            #   term_percent: 8
            #   kill_percent: 4
            """),
        "requirements.txt": f"sparkguard=={__version__}\n",
        ".sparkguard/review.sh": REVIEW_SCRIPT,
        ".github/workflows/sparkguard.yml": GITHUB_WORKFLOW.replace("INVENTORY", inventory),
        ".gitlab-ci.yml": GITLAB_CI.replace("INVENTORY", inventory),
    }


def _what(path: Path) -> str:
    why = safe_write.refusal(path)  # a link (dangling or not), a directory, a FIFO: said as such
    return f" and {why}" if why else ""


def run(args: argparse.Namespace) -> int:
    root = Path(args.directory)
    planned = files(args)
    # lexists: a link counts as there even when it leads nowhere (a dangling link is not a free name)
    existing = [name for name in planned if os.path.lexists(root / name)]
    if existing:
        raise ConfigError([Problem("", "init", str(root / name), f"already exists{_what(root / name)}; init never "
                                   f"overwrites (nor writes through a link): move it away or init another directory")
                           for name in existing])
    for folder in sorted({parent for name in planned for parent in Path(name).parents if parent != Path(".")}):
        safe_write.check_directory(root / folder)  # a link on the way is refused before anything is written
    safe_write.output_directory(root)
    for name, content in planned.items():
        path = root / name
        # Created new (O_EXCL, never through a link, no link followed below ROOT); the script's mode is set
        # on the file this call created, by its descriptor.
        safe_write.write(path, content, root=root, mode=0o755 if name.endswith(".sh") else None, exclusive=True)
        print(f"wrote {path}")
    print(f"next: edit {root}/inventory/{args.name}/hosts.yml, then `sparkguard validate {root}/inventory/{args.name}`")
    return 0


REVIEW_SCRIPT = """#!/bin/sh
# sparkguard review of a change (written by `sparkguard init`; run by CI on every pull/merge request):
#   .sparkguard/review.sh INVENTORY BASE_REF OUT_DIR
# validate and plan the change, render the base and the change, and write OUT_DIR/review.md with
# the rendered diff. render never writes a secret (it shows as <secret>), so the diff is safe to post.
# Exit non-zero when the change does not validate or does not fit (plan), so the check goes red.
set -eu
inventory=$1 base=$2 out=$3
mkdir -p "$out"
sparkguard validate "$inventory"
sparkguard plan "$inventory" > "$out/plan.txt"
sparkguard render "$inventory" --out "$out/head" > /dev/null
worktree=$(mktemp -d)
trap 'git worktree remove --force "$worktree" >/dev/null 2>&1 || rm -rf "$worktree"' EXIT
git worktree add --detach --quiet "$worktree" "$base"
if [ -f "$worktree/$inventory/hosts.yml" ]; then
  sparkguard render "$worktree/$inventory" --out "$out/base" > /dev/null
else
  mkdir -p "$out/base"   # a new inventory: everything is added
fi
{
  echo "### sparkguard: what this change does to the nodes ($inventory)"
  echo
  echo '```'
  cat "$out/plan.txt"
  echo '```'
  echo
  echo '```diff'
  (cd "$out" && diff -ruN base head) || true
  echo '```'
} > "$out/review.md"
echo "review written to $out/review.md"
"""

GITHUB_WORKFLOW = """# sparkguard review (written by `sparkguard init`): on every pull request, validate and plan the
# inventory, and post what the change does to each node (the rendered diff; secrets show as <secret>).
name: sparkguard
on:
  pull_request:
    paths: ["INVENTORY/**", "requirements.txt"]
permissions:
  contents: read
  pull-requests: write
jobs:
  review:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: pip install -r requirements.txt
      - run: .sparkguard/review.sh INVENTORY "origin/${{ github.base_ref }}" "$RUNNER_TEMP/sparkguard"
      - if: always()
        env:
          GH_TOKEN: ${{ github.token }}
        run: |
          test -f "$RUNNER_TEMP/sparkguard/review.md" &&
            gh pr comment "${{ github.event.pull_request.number }}" --body-file "$RUNNER_TEMP/sparkguard/review.md"
"""

GITLAB_CI = """# sparkguard review (written by `sparkguard init`): on every merge request, validate and plan the
# inventory, and keep what the change does to each node (the rendered diff; secrets show as <secret>)
# as an artifact; with a SPARKGUARD_NOTE_TOKEN (api scope) it is also posted as a note.
sparkguard-review:
  image: python:3.12
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      changes: ["INVENTORY/**/*", "requirements.txt"]
  script:
    - pip install -r requirements.txt
    - git fetch origin "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
    - .sparkguard/review.sh INVENTORY "origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME" sparkguard-review
    - |
      if [ -n "${SPARKGUARD_NOTE_TOKEN:-}" ]; then
        python3 -c 'import json,sys; print(json.dumps({"body": open(sys.argv[1]).read()}))' sparkguard-review/review.md |
          curl --fail -sS -X POST -H "PRIVATE-TOKEN: $SPARKGUARD_NOTE_TOKEN" -H "Content-Type: application/json" \\
            --data @- "$CI_API_V4_URL/projects/$CI_PROJECT_ID/merge_requests/$CI_MERGE_REQUEST_IID/notes"
      fi
  artifacts:
    when: always
    paths: [sparkguard-review/]
"""
