"""sparkguard init DIR: scaffold an operator's repository (inventory, pinned tool, review in CI).

An operator keeps the fleet's inventory in their own repository and reviews every change as a
pull request. ``init`` writes the starting point: ``inventory/NAME/hosts.yml`` with the node
profile filled in, ``group_vars/``, ``requirements.txt`` pinning this sparkguard, and one review
script that GitHub Actions and GitLab CI both run on a pull/merge request: validate, plan, render
the target branch and the change, and write ``review.md`` with the rendered diff (secrets show as
``<secret>``, since render never writes them), or what was refused.

The CI is two jobs, since the review runs the change's own code (its requirements, review script and
inventory, any of which the change may rewrite): the job that runs it holds no secret and no write
permission and keeps only ``review.md``; a second job that runs none of the change's code (a
``workflow_run`` workflow on GitHub, a later ``GIT_STRATEGY: none`` job on GitLab whose token is
protected, masked and scoped to it) posts ``review.md`` as text, read as data. docs/security.md says why.

It never overwrites: an existing file is exit 2, naming it.
"""

from __future__ import annotations

import argparse
import os
import textwrap
from pathlib import Path

from ... import __version__, safe_write
from ...errors import ConfigError, Problem
from ...inventory.loader import name_problem
from ...pyinfra_inventory import ADAPTER_SOURCE
from ..init_pin import pin_for
from . import Subcommands

CI_CHOICES = ("github", "gitlab", "both", "none")
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
    parser.add_argument("--pin", metavar="SPEC",
                        help="where CI installs sparkguard from: git+https://...@COMMIT or a sparkguard wheel file "
                             "(copied in); default: this sparkguard's own git checkout and commit")
    parser.add_argument("--ci", choices=CI_CHOICES, default="both",
                        help="the review CI to write: github, gitlab, both (default) or none (a repository with CI "
                             "of its own: run .sparkguard/review.sh from it)")
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


def files(args: argparse.Namespace) -> dict[str, str | bytes]:
    """Relative path -> content of everything init writes."""
    memory = args.memory_total_gib if args.memory_total_gib is not None else PROFILES[args.profile]
    if memory is None:
        raise ConfigError([Problem("", "--memory-total-gib", None,
                                   f"profile {args.profile} has no known MemTotal: give the nodes' MemTotal in GiB "
                                   f"(`grep MemTotal /proc/meminfo`, divided by 1048576)")])
    hosts = _hosts(args)
    pin = pin_for(args.pin)
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
        # Plain pyinfra reads the same inventory through it: pyinfra INVENTORY/inventory.py DEPLOY.
        f"{inventory}/inventory.py": ADAPTER_SOURCE.format(rel=inventory),
        "requirements.txt": (f"# sparkguard {__version__}, by its source (sparkguard is on no package index; a bare name\n"
                             f"# could install a squatter's): `sparkguard init --pin` sets it.\n{pin.line}\n"),
        **({pin.wheel[0]: pin.wheel[1]} if pin.wheel else {}),
        ".sparkguard/review.sh": REVIEW_SCRIPT,
        **ci_files(args.ci, inventory),
    }


def ci_files(choice: str, inventory: str) -> dict[str, str]:
    """The review CI for ``choice``: GitHub's two workflows, GitLab's .gitlab-ci.yml, both, or none."""
    github = {".github/workflows/sparkguard.yml": GITHUB_WORKFLOW.replace("INVENTORY", inventory),
              ".github/workflows/sparkguard-comment.yml": GITHUB_COMMENT_WORKFLOW}
    gitlab = {".gitlab-ci.yml": GITLAB_CI.replace("INVENTORY", inventory)}
    return {"github": github, "gitlab": gitlab, "both": {**github, **gitlab}, "none": {}}[choice]


def _what(path: Path) -> str:
    why = safe_write.refusal(path)  # a link (dangling or not), a directory, a FIFO: said as such
    return f" and {why}" if why else ""


def _is_ci(name: str) -> bool:
    return name.startswith(".github/") or name == ".gitlab-ci.yml"


def run(args: argparse.Namespace) -> int:
    root = Path(args.directory)
    planned = files(args)
    # lexists: a link counts as there even when it leads nowhere (a dangling link is not a free name)
    existing = [name for name in planned if os.path.lexists(root / name)]
    if existing:
        raise ConfigError([Problem("", "init", str(root / name), f"already exists{_what(root / name)}; init never "
                                   f"overwrites (nor writes through a link): move it away or init another directory"
                                   + (f" (a repository with CI of its own: --ci none, or --ci "
                                      f"{'gitlab' if 'github' in name else 'github'})" if _is_ci(name) else ""))
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
# validate and plan the change, render the base and the change, and write OUT_DIR/review.md: plain text, the
# plan and the rendered diff, and the only file written in OUT_DIR (renders and logs go to a temporary
# directory, removed on exit). render never writes a secret (it shows as <secret>), and sparkguard never
# prints a file an inventory names nor the environment, so the review holds neither.
# When the change is refused (it does not validate, does not fit, or does not render), review.md says what
# was refused and why, and the script exits 1, so the check goes red.
# The CI job that runs this runs the change's own code (its requirements, this script, its inventory): it
# holds no secret and writes nothing but review.md. Another job, which runs none of the change's code,
# posts review.md as text (.github/workflows/sparkguard-comment.yml, .gitlab-ci.yml's sparkguard-note).
set -eu
inventory=$1 base=$2 out=$3
mkdir -p "$out"
review="$out/review.md"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
refused() {  # $1: what was refused; $work/log: what the step that refused it said
  { echo "sparkguard review of $inventory: REFUSED: $1"; echo; cat "$work/log"; } > "$review"
  cat "$work/log" >&2
  echo "review written to $review (refused: $1)" >&2
  exit 1
}
sparkguard validate "$inventory" > "$work/log" 2>&1 || refused "the change does not validate"
sparkguard plan "$inventory" > "$work/plan" 2> "$work/log" ||
  { cat "$work/log" >> "$work/plan"; mv "$work/plan" "$work/log"; refused "the change does not fit (plan)"; }
sparkguard render "$inventory" --out "$work/head" > /dev/null 2> "$work/log" || refused "the change does not render"
git worktree add --detach --quiet "$work/tree" "$base" > "$work/log" 2>&1 || refused "no base $base to compare with"
if [ -f "$work/tree/$inventory/hosts.yml" ]; then
  sparkguard render "$work/tree/$inventory" --out "$work/base" > /dev/null 2> "$work/log" ||
    refused "the base ($base) does not render"
else
  mkdir "$work/base"   # a new inventory: everything is added
fi
{
  echo "sparkguard review of $inventory: what this change does to the nodes"
  echo
  # First what changes where, so a comment cut at the platform's limit still shows every host.
  echo "files changed, per host (the full diff follows; a cut comment has it whole in the job's artifact):"
  (cd "$work" && diff -rqN base head) | awk '{ p = $2; sub("^base/", "", p); sub("/.*", "", p);
    sub("[.]state[.]yml$", "", p); n[p]++ } END { for (h in n) printf "  %s: %d\\n", h, n[h] }' | sort
  [ -n "$(cd "$work" && diff -rqN base head)" ] || echo "  none: the nodes would get the same files"
  echo
  cat "$work/plan"
  echo
  # the file headers without their times, so the same change gives the same review
  (cd "$work" && diff -ruN base head) | awk 'h > 0 { sub(/\\t.*/, ""); h-- } /^diff -ruN / { h = 2 } { print }'
} > "$review"
echo "review written to $review"
"""

# How both posters read review.md: the one piece of the change that reaches a job holding a token, so it is data.
# A job that ran the change's own code wrote it (that code may be anything: the change can rewrite review.sh
# and requirements.txt). It is opened without following a link (a link to /proc/self/environ would otherwise
# read the poster's own token), must be a regular file, is capped, and is shown in a fence that no line of it
# can close: no Markdown, no mention, no link, no control or bidirectional character. Never run, never put in a
# command line. Run with `python3 -I`: the working directory (where a review job's leftovers may lie) is not
# on the import path.
POST_FORMAT = r'''import os
import re
import stat
import sys

LIMIT = 60000  # bytes of review.md shown: a GitHub comment holds 65536 characters


def comment(directory):
    """DIRECTORY/review.md as the text to post, or None when there is none (refused: exit 1)."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            fd = os.open("review.md", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        finally:
            os.close(folder)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise SystemExit("sparkguard: review.md refused, nothing posted: %s (a link?)" % error.strerror)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SystemExit("sparkguard: review.md refused, nothing posted: not a regular file")
    with os.fdopen(fd, "rb") as file:
        data = file.read(LIMIT + 1)
    text = data[:LIMIT].decode("utf-8", "replace")
    text = "".join(c if c in "\n\t" or c.isprintable() else "\ufffd" for c in text)
    if len(data) > LIMIT:
        text += "\n[cut at %d bytes: the whole review is the review job's artifact]" % LIMIT
    text = re.sub("`{9,}", "`" * 8, text)  # so the fence stays short: at most 9 backticks
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", text)), default=0))
    return ("sparkguard review (made by running this change's own code: as trustworthy as the change;"
            " shown as text):\n\n" + fence + "text\n" + text + "\n" + fence + "\n")
'''


def _indent(text: str, spaces: int) -> str:
    return textwrap.indent(text, " " * spaces)


GITHUB_WORKFLOW = """# sparkguard review (written by `sparkguard init`): on every pull request, validate and plan the
# inventory and render what the change does to each node (the rendered diff; secrets show as <secret>).
# This job runs the pull request's own code (its requirements, review script and inventory), so it holds
# no secret and no write permission: a read-only token, not kept by the checkout, and no secret. It
# only uploads review.md as the artifact sparkguard-review. sparkguard-comment.yml, a separate workflow
# that never checks out or runs pull request code, posts it as text.
name: sparkguard
on:
  pull_request:
    paths: ["INVENTORY/**", "requirements.txt", ".sparkguard/**"]
permissions:
  contents: read
jobs:
  review:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0
          persist-credentials: false
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - run: pip install -r requirements.txt
      - env:
          BASE_REF: ${{ github.base_ref }}
        run: .sparkguard/review.sh INVENTORY "origin/$BASE_REF" "$RUNNER_TEMP/sparkguard"
      - if: always()
        uses: actions/upload-artifact@v4
        with:
          name: sparkguard-review
          path: ${{ runner.temp }}/sparkguard/review.md
          if-no-files-found: ignore
          retention-days: 7
"""

GITHUB_COMMENT_WORKFLOW = r"""# sparkguard comment (written by `sparkguard init`): posts a pull request's review as a comment.
# It runs from the default branch when a sparkguard run ends (workflow_run), never checks out nor runs
# pull request code, and holds the only write permission (pull-requests: write, with the workflow's own
# GITHUB_TOKEN; no other secret). review.md, downloaded by the run's id, is data: read without following a
# link, capped, and posted in a fence (plain text); nothing from it reaches a command line or an expression.
# The pull request is the open one whose head is the commit that run reviewed, found from the event and the
# API, never from the artifact.
name: sparkguard comment
on:
  workflow_run:
    workflows: [sparkguard]
    types: [completed]
permissions: {}
jobs:
  comment:
    if: github.event.workflow_run.event == 'pull_request'
    runs-on: ubuntu-24.04
    permissions:
      actions: read
      pull-requests: write
    env:
      GH_TOKEN: ${{ github.token }}
      GH_REPO: ${{ github.repository }}
      RUN_ID: ${{ github.event.workflow_run.id }}
      HEAD_SHA: ${{ github.event.workflow_run.head_sha }}
      HEAD_OWNER: ${{ github.event.workflow_run.head_repository.owner.login }}
      HEAD_BRANCH: ${{ github.event.workflow_run.head_branch }}
    steps:
      - name: post review.md as text
        run: |
          set -eu
          dir="$RUNNER_TEMP/sparkguard-review"
          if ! gh run download "$RUN_ID" --name sparkguard-review --dir "$dir"; then
            echo "sparkguard: run $RUN_ID kept no sparkguard-review artifact: nothing posted"
            exit 0
          fi
          python3 -I - "$dir" "$RUNNER_TEMP/comment.md" <<'EOF'
@POST_FORMAT@
          body = comment(sys.argv[1])
          if body is None:
              raise SystemExit("sparkguard: the artifact holds no review.md: nothing posted")
          with open(sys.argv[2], "w", encoding="utf-8") as out:
              out.write(body)
          EOF
          gh api --method GET "repos/$GH_REPO/pulls" -f state=open -f head="$HEAD_OWNER:$HEAD_BRANCH" \
            --jq '.[] | [.number, .head.sha] | @tsv' > "$RUNNER_TEMP/pulls"
          posted=0
          while read -r number sha; do
            case "$number" in ''|*[!0-9]*) continue ;; esac
            if [ "$sha" = "$HEAD_SHA" ]; then
              gh pr comment "$number" --body-file "$RUNNER_TEMP/comment.md"
              posted=1
            fi
          done < "$RUNNER_TEMP/pulls"
          if [ "$posted" = 0 ]; then
            echo "sparkguard: no open pull request has head $HEAD_SHA (pushed again since?): nothing posted"
          fi
""".replace("@POST_FORMAT@\n", _indent(POST_FORMAT + "\n", 10))

GITLAB_CI = r"""# sparkguard review (written by `sparkguard init`): on every merge request, validate and plan the
# inventory and render what the change does to each node (the rendered diff; secrets show as <secret>).
# sparkguard-review runs the merge request's own code (its requirements, review script and inventory): it
# references no token, and keeps only review.md as its artifact. sparkguard-note, in the next stage, checks
# out nothing and runs only the script below, which reads review.md as data (no link followed, capped, posted
# as text in a fence) and posts it as a note with SPARKGUARD_NOTE_TOKEN, when that variable reaches it.
# SPARKGUARD_NOTE_TOKEN: a project access token, role Reporter, scope api (the narrowest that can write a
# note; read_api cannot), with an expiry date. Its CI/CD variable: protected, masked (and hidden), with
# environment scope sparkguard-note, so only this job gets it, and only in pipelines GitLab counts as
# protected (a merge request between protected branches, not from a fork). A merge request from any other
# branch can rewrite this file, so it never gets the token: its review stays sparkguard-review's artifact.
# Run both jobs on runners that start each job in a fresh container (docker, kubernetes), not a shell runner.
stages: [review, note]

sparkguard-review:
  stage: review
  image: python:3.12
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      changes: ["INVENTORY/**/*", "requirements.txt", ".sparkguard/**/*"]
  script:
    - pip install -r requirements.txt
    - git fetch origin "$CI_MERGE_REQUEST_TARGET_BRANCH_NAME"
    - .sparkguard/review.sh INVENTORY "origin/$CI_MERGE_REQUEST_TARGET_BRANCH_NAME" sparkguard-review
  artifacts:
    when: always
    expire_in: 1 week
    paths: [sparkguard-review/review.md]

sparkguard-note:
  stage: note
  image: python:3.12-slim
  needs: [{job: sparkguard-review, artifacts: true}]
  variables:
    GIT_STRATEGY: none
  environment:
    name: sparkguard-note
    action: access
  rules:
    - if: $CI_PIPELINE_SOURCE == "merge_request_event"
      changes: ["INVENTORY/**/*", "requirements.txt", ".sparkguard/**/*"]
      when: always
  script:
    - |
      python3 -I - "$CI_PROJECT_DIR/sparkguard-review" <<'EOF'
@POST_FORMAT@
      import json
      import urllib.request

      token = os.environ.get("SPARKGUARD_NOTE_TOKEN", "")
      if not token:
          print("sparkguard: no SPARKGUARD_NOTE_TOKEN here (protected: only pipelines of protected branches get it):"
                " nothing posted; the review is sparkguard-review's artifact")
          raise SystemExit(0)
      body = comment(sys.argv[1])
      if body is None:
          print("sparkguard: sparkguard-review left no review.md: nothing posted")
          raise SystemExit(0)
      url = "%s/projects/%s/merge_requests/%s/notes" % (
          os.environ["CI_API_V4_URL"], os.environ["CI_PROJECT_ID"], os.environ["CI_MERGE_REQUEST_IID"])
      request = urllib.request.Request(url, data=json.dumps({"body": body}).encode(), method="POST",
                                       headers={"PRIVATE-TOKEN": token, "Content-Type": "application/json"})
      with urllib.request.urlopen(request, timeout=60) as response:
          print("sparkguard: note posted (HTTP %d)" % response.status)
      EOF
""".replace("@POST_FORMAT@\n", _indent(POST_FORMAT + "\n", 6))
