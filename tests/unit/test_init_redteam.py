"""init's CI against a hostile change (issue 27): the job that runs a change's code holds no secret, and nothing
of the runner (its files, its environment, its tokens) reaches review.md, the artifact or the job's log.

A real git repository made by ``sparkguard init``, with a bare ``origin``, and a hostile branch whose inventory
reaches for the runner: settings naming /proc/self/environ and /etc/shadow, symlinks out of the repository, a
vars file linked to a file holding a token, settings naming the runner's token variables, hostile host names.
The review job's own command lines, read from the generated workflow and .gitlab-ci.yml, run here as CI runs
them, with every token variable a CI could hold set to a canary. The posting jobs run too, on hostile review.md
files: GitHub's with a stand-in ``gh``, GitLab's against a local HTTP server. And the generated YAML is checked
for its structure (who holds which permission, what each job runs) and against the published schemas.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkguard.cli.commands import init as init_command
from tests.certs import self_signed
from tests.conftest import INIT_PIN, run_cli
from tests.unit.test_init import BIN, git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

CANARY = "sg-canary-7f3a9e"
# Every token variable a CI runner could hold (GitHub, GitLab, this tool's own names), each set to a canary.
TOKEN_VARIABLES = ("CI_JOB_TOKEN", "GITHUB_TOKEN", "GH_TOKEN", "GITLAB_TOKEN", "ACTIONS_RUNTIME_TOKEN",
                   "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "CI_REGISTRY_PASSWORD", "SPARKGUARD_REVIEW_TOKEN",
                   "SPARKGUARD_NOTE_TOKEN")
# The only `${{ }}` expressions the generated workflows may hold, and what they stand for here.
EXPRESSIONS = {"github.base_ref": "main", "github.token": f"{CANARY}-github-token",
               "github.repository": "ops/fleet", "github.event.workflow_run.id": "4242",
               "github.event.workflow_run.head_sha": "c0ffee" * 6 + "c0ff",
               "github.event.workflow_run.head_repository.owner.login": "mallory",
               "github.event.workflow_run.head_branch": "fix;$(touch pwned)`touch pwned`",
               "runner.temp": "@RUNNER_TEMP@"}


# --------------------------------------------------------------------------------------------- the repository

@pytest.fixture
def ops(tmp_path) -> Path:
    """init's repository, committed on main and pushed to a bare origin, as CI clones it."""
    done = run_cli("init", *INIT_PIN, str(tmp_path / "ops-repo"), "--host", "gpu-01=192.0.2.21", "--host", "gpu-02=192.0.2.22")
    assert done.returncode == 0, done.stderr
    repo = tmp_path / "ops-repo"
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fleet")
    git(tmp_path, "init", "-q", "--bare", "origin.git")
    git(repo, "remote", "add", "origin", str(tmp_path / "origin.git"))
    git(repo, "push", "-q", "origin", "main")
    return repo


@pytest.fixture
def runner(tmp_path) -> Path:
    """Files on the CI runner outside the repository: a token file, a vars file holding a token, a key pair."""
    home = tmp_path / "runner"
    home.mkdir()
    (home / "token.txt").write_text(f"TOKEN={CANARY}-file\n")
    (home / "vars.yml").write_text(f"node: {{memory_total_gib: 'TOKEN={CANARY}-vars'}}\n"
                                   f"vllm: {{hf_token: {CANARY}-vars-hf}}\n")
    self_signed(home, ["192.0.2.21", "192.0.2.22"])
    return home


def _monitoring(web: str) -> str:
    return f"monitoring: {{enabled: true, alertmanager: {{mode: none}}, web: {web}}}\n"


def _link(link: Path, target: Path | str) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)


def _proc_cert(inv: Path, home: Path) -> None:
    (inv / "group_vars/dgx_spark.yml").write_text(
        _monitoring(f"{{tls_cert_file: /proc/self/environ, tls_key_file: {home}/node.key}}"))


def _shadow_ca(inv: Path, home: Path) -> None:
    (inv / "group_vars/dgx_spark.yml").write_text(
        _monitoring(f"{{tls_cert_file: {home}/node.crt, tls_key_file: /etc/shadow, tls_ca_file: /etc/shadow}}"))


def _ssh_key_to_proc(inv: Path, home: Path) -> None:
    _link(inv / "id_runner", "/proc/self/environ")
    _link(inv / "known_hosts", "/proc/self/environ")
    (inv / "host_vars").mkdir()
    (inv / "host_vars/gpu-01.yml").write_text("ssh_key: id_runner\nssh_known_hosts_file: known_hosts\n")


def _key_to_token_file(inv: Path, home: Path) -> None:
    _link(inv / "tls/node.key", home / "token.txt")
    (inv / "group_vars/dgx_spark.yml").write_text(
        _monitoring(f"{{tls_cert_file: {home}/node.crt, tls_key_file: {inv}/tls/node.key}}"))


def _vars_linked_out(inv: Path, home: Path) -> None:
    _link(inv / "host_vars/gpu-01.yml", home / "vars.yml")


def _hostile_names(inv: Path, home: Path) -> None:
    hosts = yaml.safe_load((inv / "hosts.yml").read_text())
    hosts["all"]["children"]["dgx_spark"]["hosts"] = {
        "$(cat /etc/shadow)": {"ssh_host": "192.0.2.31"}, "../../etc/cron.d/x": {"ssh_host": "192.0.2.32"},
        "gpu-01": {"ssh_host": "${GITHUB_TOKEN}.example.org"}, "gpu-02`id`": {"ssh_host": "$(env)"}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))


def _names_the_runners_secrets(inv: Path, home: Path) -> None:
    """Valid: every setting that names a token variable or a runner file, a key pair linked from outside."""
    _link(inv / "tls/node.crt", home / "node.crt")
    _link(inv / "tls/node.key", home / "node.key")
    _link(inv / "known_hosts", home / "token.txt")
    (inv / "group_vars/dgx_spark.yml").write_text(
        "monitoring:\n  enabled: true\n"
        "  alertmanager: {webhook_url: 'https://hooks.example.org/$CI_JOB_TOKEN/${GITHUB_TOKEN}'}\n"
        f"  web: {{basic_auth_user: ops, basic_auth_password_file: {home}/token.txt,"
        f" tls_cert_file: {inv}/tls/node.crt, tls_key_file: {inv}/tls/node.key}}\n"
        "vllm: {hf_token_env: GITHUB_TOKEN, api_key_env: SPARKGUARD_NOTE_TOKEN}\n"
        "ssh_known_hosts_file: known_hosts\n")


# name: (edit, refused?, what the review must say)
HOSTILE: dict[str, tuple[Any, bool, tuple[str, ...]]] = {
    "tls_cert_file: /proc/self/environ": (
        _proc_cert, True, ("monitoring.web.tls_cert_file", "/proc/self/environ", "/proc, /sys or /dev")),
    "tls_key_file and tls_ca_file: /etc/shadow": (
        _shadow_ca, True, ("monitoring.web.tls_ca_file", "monitoring.web.tls_key_file", "/etc/shadow")),
    "ssh_key and known_hosts: symlinks out of the repository to /proc/self/environ": (
        _ssh_key_to_proc, True, ("ssh_key", "/proc, /sys or /dev")),
    "tls_key_file: a symlink out of the repository to the runner's token file": (
        _key_to_token_file, True, ("monitoring.web.tls_key_file", "tls/node.key")),
    "host_vars linked to a vars file holding a token": (
        _vars_linked_out, True, ("host_vars/gpu-01.yml", "<not shown: read from a file outside the inventory>")),
    "hostile host names and addresses": (
        _hostile_names, True, ("not a valid name", "$(cat /etc/shadow)", "../../etc/cron.d/x")),
    "settings naming the runner's token variables and files (valid)": (
        _names_the_runners_secrets, False, ("<secret>", "+++ head/gpu-01/")),
}


# ---------------------------------------------------------------------------------- running CI's own commands

def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


def _resolve(text: str, runner_temp: Path) -> str:
    """A workflow value with its `${{ }}` expressions replaced; an expression not in EXPRESSIONS fails."""
    def one(match: re.Match) -> str:
        expression = match.group(1).strip()
        assert expression in EXPRESSIONS, f"unexpected expression ${{{{ {expression} }}}} in a generated workflow"
        return EXPRESSIONS[expression].replace("@RUNNER_TEMP@", str(runner_temp))
    return re.sub(r"\$\{\{(.*?)\}\}", one, text)


def _job_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A runner's environment: the test's PATH (sparkguard from this checkout), every token variable a canary."""
    (tmp_path / "jobtmp").mkdir(exist_ok=True)
    return {"PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(tmp_path / "runner-home"), "LANG": "C.UTF-8",
            "TMPDIR": str(tmp_path / "jobtmp"), "CI": "true", "SG_CANARY": CANARY,
            **{name: f"{CANARY}-{name}" for name in TOKEN_VARIABLES}, **extra}


def _run_github_review(repo: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[Path], Path]:
    """The review job's run steps (pip install aside: sparkguard comes from this checkout), as Actions runs them
    (bash -eo pipefail, in the checkout). Returns the last step, the files its upload step keeps, and the
    directory they are in."""
    workflow = _load(repo / ".github/workflows/sparkguard.yml")
    runner_temp = tmp_path / "runner-temp"
    runner_temp.mkdir()
    env = _job_env(tmp_path, RUNNER_TEMP=str(runner_temp), GITHUB_BASE_REF="main", GITHUB_EVENT_NAME="pull_request")
    done = None
    uploads: list[Path] = []
    for step in workflow["jobs"]["review"]["steps"]:
        if "run" in step and not step["run"].startswith("pip install"):
            step_env = {name: _resolve(str(value), runner_temp) for name, value in step.get("env", {}).items()}
            done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=repo,
                                  env={**env, **step_env}, capture_output=True, text=True, timeout=300)
        if step.get("uses", "").startswith("actions/upload-artifact"):
            paths = [_resolve(line, runner_temp) for line in step["with"]["path"].splitlines() if line.strip()]
            uploads = [Path(path) for path in paths if Path(path).exists()]
    assert done is not None
    return done, uploads, runner_temp / "sparkguard"


def _run_gitlab_review(repo: Path, tmp_path: Path) -> tuple[subprocess.CompletedProcess, list[Path], Path]:
    """sparkguard-review's script lines (pip install aside) in one shell with -e, as the runner runs them."""
    job = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())["sparkguard-review"]
    lines = [line for line in job["script"] if not line.startswith("pip install")]
    env = _job_env(tmp_path, CI_MERGE_REQUEST_TARGET_BRANCH_NAME="main", CI_PIPELINE_SOURCE="merge_request_event",
                   CI_PROJECT_DIR=str(repo))
    done = subprocess.run(["sh", "-e", "-c", "\n".join(lines)], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300)
    uploads = [repo / path for path in job["artifacts"]["paths"] if (repo / path).exists()]
    return done, uploads, repo / "sparkguard-review"


def _shadow() -> list[str]:
    """What /etc/shadow holds, where this test can read it (lines, and each password field of any length)."""
    try:
        lines = Path("/etc/shadow").read_text().splitlines()
    except OSError:
        return []
    fields = [line.split(":")[1] for line in lines if line.count(":") >= 2 and len(line.split(":")[1]) > 3]
    return [line for line in lines if line.strip()] + fields


def _leaks(text: str, env: dict[str, str]) -> list[str]:
    """Runner content found in TEXT: a canary, a line or hash of /etc/shadow, an environment entry."""
    found = [CANARY] if CANARY in text else []
    found += [entry for entry in _shadow() if entry in text]
    found += [f"{name}=" for name, value in {**os.environ, **env}.items()
              if len(value) >= 6 and f"{name}={value}" in text]
    return found


def _all_text(directory: Path) -> str:
    return "".join(path.read_bytes().decode("utf-8", "replace") for path in sorted(directory.rglob("*"))
                   if path.is_file() or path.is_symlink())


# --------------------------------------------------------------------------- the hostile branch, both CIs

@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_branch_brings_nothing_of_the_runner_into_the_review(ops, runner, tmp_path, case):
    edit, refused, says = HOSTILE[case]
    git(ops, "checkout", "-qb", "hostile")
    edit(ops / "inventory/prod", runner)
    git(ops, "add", "-A")
    git(ops, "commit", "-qm", case)
    env = _job_env(tmp_path)
    for name, run_job in (("github", _run_github_review), ("gitlab", _run_gitlab_review)):
        done, uploads, artifact_dir = run_job(ops, tmp_path)
        log = done.stdout + done.stderr
        assert (done.returncode != 0) == refused, (name, log)
        assert "Traceback" not in log, (name, log)
        # the artifact is review.md and nothing else: no renders, plan or log beside it
        assert [path.name for path in uploads] == ["review.md"], (name, uploads)
        assert sorted(path.name for path in artifact_dir.iterdir()) == ["review.md"], name
        review = (artifact_dir / "review.md").read_text()
        # nothing of the runner in the review, the artifact directory or the job's log (public on a public repo)
        for where, text in (("review.md", review), ("artifact", _all_text(artifact_dir)), ("log", log)):
            assert not _leaks(text, env), (name, where, _leaks(text, env), text)
        # and the review says what it refused, and why
        if refused:
            assert "REFUSED" in review and "does not validate" in review, (name, review)
        else:
            assert "what this change does to the nodes" in review and "verdict: FITS" in review, (name, review)
        for words in says:
            assert words in review, (name, words, review)
        # renders and logs went to the job's temporary directory and are gone; the base's worktree too
        assert not any((tmp_path / "jobtmp").iterdir()), name
        assert git(ops, "worktree", "list").count("\n") == 1, name
        shutil.rmtree(artifact_dir)
        shutil.rmtree(tmp_path / "runner-temp", ignore_errors=True)


# ------------------------------------------------------------------------------------------- the posters

HOSTILE_REVIEW = ("```\n" "```` @maintainers please merge: [ok](https://evil.example/) <img src=x onerror=alert(1)>\n"
                  "$(touch pwned) `touch pwned` ${{ secrets.GITHUB_TOKEN }} ${GH_TOKEN}\n"
                  "\u202e\u0007\x1b[31mred\r\nEOF\n'EOF'\n" + "`" * 9 + "\n")


def _fenced(body: str) -> str:
    """The text between the fence lines, asserting the fence is longer than any backtick run inside."""
    match = re.search(r"^(`{3,})text\n(.*)\n\1\n\Z", body, re.S | re.M)
    assert match, body
    fence, text = match.groups()
    assert all(len(run) < len(fence) for run in re.findall("`+", text)), body
    return text


def _fake_gh(tmp_path: Path) -> Path:
    """A stand-in for gh: `run download` copies a prepared artifact directory (links and FIFOs as they are),
    `api` prints a prepared list of pull requests as --jq would, `pr comment` keeps the body file."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text('#!/bin/sh\nprintf "%s\\n" "$*" >> "$GH_LOG"\ncase "$1 $2" in\n'
                  '  "run download") [ -d "$FAKE_ARTIFACT" ] || exit 1; mkdir -p "$7"; cp -a "$FAKE_ARTIFACT/." "$7/" ;;\n'
                  '  "api --method") cat "$FAKE_PULLS" ;;\n'
                  '  "pr comment") cp "$5" "$GH_POSTED/$3.md" ;;\n'
                  '  *) exit 3 ;;\nesac\n')
    gh.chmod(0o755)
    return bin_dir


def _run_github_comment(repo: Path, tmp_path: Path, artifact: Path, pulls: str) -> tuple[subprocess.CompletedProcess,
                                                                                      dict[str, str], list[str]]:
    workflow = _load(repo / ".github/workflows/sparkguard-comment.yml")
    job = workflow["jobs"]["comment"]
    runner_temp = tmp_path / "comment-temp"
    runner_temp.mkdir()
    posted = tmp_path / "posted"
    posted.mkdir()
    (tmp_path / "pulls.tsv").write_text(pulls)
    env = {"PATH": f"{_fake_gh(tmp_path)}:{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
           "RUNNER_TEMP": str(runner_temp), "GH_LOG": str(tmp_path / "gh.log"), "GH_POSTED": str(posted),
           "FAKE_ARTIFACT": str(artifact), "FAKE_PULLS": str(tmp_path / "pulls.tsv"),
           **{name: _resolve(str(value), runner_temp) for name, value in job["env"].items()}}
    workdir = tmp_path / "comment-workdir"  # the runner's workspace: empty, nothing checked out
    workdir.mkdir()
    [step] = job["steps"]
    done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=workdir,
                          env=env, capture_output=True, text=True, timeout=60)
    calls = (tmp_path / "gh.log").read_text().splitlines() if (tmp_path / "gh.log").exists() else []
    return done, {path.stem: path.read_text() for path in posted.iterdir()}, calls


def test_the_comment_workflow_posts_review_md_as_text_to_the_pull_request_of_that_run(ops, tmp_path):
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "review.md").write_text(HOSTILE_REVIEW)
    sha = EXPRESSIONS["github.event.workflow_run.head_sha"]
    # open pull requests from that head: one at the reviewed commit, one pushed since, one with a forged number
    done, posted, calls = _run_github_comment(ops, tmp_path, artifact, f"12\t{sha}\n13\t{'e' * 40}\n12;id\t{sha}\n")
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(posted) == ["12"]
    text = _fenced(posted["12"])
    assert "as trustworthy as the change" in posted["12"].split("\n")[0]
    assert "$(touch pwned) `touch pwned` ${{ secrets.GITHUB_TOKEN }} ${GH_TOKEN}" in text  # shown, not run
    assert "\u202e" not in text and "\x1b" not in text and "\r" not in text and "\u0007" not in text
    assert not (tmp_path / "comment-workdir/pwned").exists() and not (ops / "pwned").exists()
    assert CANARY not in posted["12"]
    # gh was asked for the run's artifact, the pull requests of the event's head, and one comment: nothing else,
    # and nothing from the artifact on its command line
    assert [call.split()[:2] for call in calls] == [["run", "download"], ["api", "--method"], ["pr", "comment"]]
    assert "head=mallory:fix;$(touch pwned)`touch pwned`" in calls[1]  # the event's branch, as one argument
    assert not any("@maintainers" in call or "evil.example" in call for call in calls)


@pytest.mark.parametrize("plant", ["a link to /proc/self/environ", "a link to a token file", "a FIFO",
                                   "a directory", "none"])
def test_the_comment_workflow_refuses_a_planted_review_md(ops, tmp_path, plant):
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (tmp_path / "token.txt").write_text(f"TOKEN={CANARY}\n")
    if plant == "a link to /proc/self/environ":
        (artifact / "review.md").symlink_to("/proc/self/environ")
    elif plant == "a link to a token file":
        (artifact / "review.md").symlink_to(tmp_path / "token.txt")
    elif plant == "a FIFO":
        os.mkfifo(artifact / "review.md")
    elif plant == "a directory":
        (artifact / "review.md").mkdir()
    sha = EXPRESSIONS["github.event.workflow_run.head_sha"]
    done, posted, calls = _run_github_comment(ops, tmp_path, artifact, f"12\t{sha}\n")
    log = done.stdout + done.stderr
    assert posted == {} and not any(call.startswith("pr comment") for call in calls), (plant, log)
    assert CANARY not in log
    if plant == "none":
        assert done.returncode != 0 and "holds no review.md" in log
    else:
        assert done.returncode != 0 and "review.md refused" in log, log


class _Notes(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, dict[str, str], bytes]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((self.path, dict(self.headers.items()), body))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def gitlab_api():
    _Notes.received = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _Notes)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/api/v4", _Notes.received
    server.shutdown()
    server.server_close()


def _run_gitlab_note(repo: Path, tmp_path: Path, api: str, token: str | None) -> subprocess.CompletedProcess:
    """sparkguard-note's script in a project directory where the review job left files behind (GIT_STRATEGY none
    keeps the builds directory a docker runner reuses): the artifact, and Python modules planted there."""
    job = yaml.safe_load((repo / ".gitlab-ci.yml").read_text())["sparkguard-note"]
    project = tmp_path / "builds"
    for module in ("json", "re", "stat", "urllib"):
        path = project / (f"{module}/__init__.py" if module == "urllib" else f"{module}.py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"open({str(tmp_path / 'pwned')!r}, 'a').write({module!r})\n")
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8", "CI_API_V4_URL": api,
           "CI_PROJECT_ID": "7", "CI_MERGE_REQUEST_IID": "3", "CI_PROJECT_DIR": str(project), "CI_JOB_TOKEN": CANARY,
           "PYTHONPATH": str(project), **({"SPARKGUARD_NOTE_TOKEN": token} if token else {})}
    return subprocess.run(["sh", "-e", "-c", "\n".join(job["script"])], cwd=project, env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_note_job_posts_review_md_as_text_with_its_token_and_runs_nothing_left_behind(ops, tmp_path, gitlab_api):
    api, received = gitlab_api
    (tmp_path / "builds/sparkguard-review").mkdir(parents=True)
    (tmp_path / "builds/sparkguard-review/review.md").write_text(HOSTILE_REVIEW)
    token = f"glpat-{CANARY}"
    done = _run_gitlab_note(ops, tmp_path, api, token)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (tmp_path / "pwned").exists()  # python3 -I: nothing imported from the project directory
    [(path, headers, body)] = received
    headers = {name.lower(): value for name, value in headers.items()}
    assert path == "/api/v4/projects/7/merge_requests/3/notes" and headers["private-token"] == token
    note = json.loads(body)["body"]
    assert "$(touch pwned) `touch pwned` ${{ secrets.GITHUB_TOKEN }}" in _fenced(note) and CANARY not in note
    assert token not in done.stdout + done.stderr


@pytest.mark.parametrize("plant", ["a link to /proc/self/environ", "the directory a link to a runner directory"])
def test_the_note_job_never_reads_its_own_environment_through_a_planted_link(ops, tmp_path, gitlab_api, plant):
    api, received = gitlab_api
    artifact = tmp_path / "builds/sparkguard-review"
    if plant == "a link to /proc/self/environ":
        artifact.mkdir(parents=True)
        (artifact / "review.md").symlink_to("/proc/self/environ")
    else:  # the directory leads to one of the runner's own, whose review.md is a plain file holding a token
        artifact.parent.mkdir(parents=True)
        (tmp_path / "runner-dir").mkdir()
        (tmp_path / "runner-dir/review.md").write_text(f"TOKEN={CANARY}\n")
        artifact.symlink_to(tmp_path / "runner-dir")
    done = _run_gitlab_note(ops, tmp_path, api, f"glpat-{CANARY}")
    assert done.returncode != 0 and "review.md refused" in done.stderr, done.stdout + done.stderr
    assert received == [] and CANARY not in done.stdout + done.stderr


def test_the_note_job_without_its_token_posts_nothing_and_passes(ops, tmp_path, gitlab_api):
    api, received = gitlab_api
    (tmp_path / "builds/sparkguard-review").mkdir(parents=True)
    (tmp_path / "builds/sparkguard-review/review.md").write_text("fine\n")
    done = _run_gitlab_note(ops, tmp_path, api, None)
    assert done.returncode == 0 and "no SPARKGUARD_NOTE_TOKEN" in done.stdout and received == []


def test_review_md_is_capped_and_a_backtick_run_never_closes_the_fence(tmp_path):
    namespace: dict[str, Any] = {}
    exec(compile(init_command.POST_FORMAT, "post_format", "exec"), namespace)  # the posters' own code
    (tmp_path / "review.md").write_bytes(b"`" * 70000)
    body = namespace["comment"](str(tmp_path))
    assert len(body) < 65536 and "[cut at 60000 bytes" in body
    assert body.split("\n")[2] == "`" * 9 + "text"  # a run of more than 8 is shown as 8: the fence stays short
    assert _fenced(body).startswith("`" * 8 + "\n")
    assert namespace["comment"](str(tmp_path / "nowhere")) is None


# ------------------------------------------------------------------------------------- the YAML's structure

def _expressions(text: str) -> set[str]:
    return {match.strip() for match in re.findall(r"\$\{\{(.*?)\}\}", text)}


def _triggers(workflow: dict) -> set[str]:
    on = workflow["on"]
    return {on} if isinstance(on, str) else set(on)


def test_the_github_job_that_runs_pr_code_can_write_nothing_and_holds_no_secret(ops):
    workflows = {path.name: _load(path) for path in sorted((ops / ".github/workflows").glob("*.yml"))}
    assert set(workflows) == {"sparkguard.yml", "sparkguard-comment.yml"}
    for name, workflow in workflows.items():
        text = (ops / ".github/workflows" / name).read_text()
        assert "pull_request_target" not in _triggers(workflow), name  # never PR code with the base's rights
        assert "secrets." not in text and "write-all" not in text, name
        assert _expressions(text) <= set(EXPRESSIONS), (name, _expressions(text) - set(EXPRESSIONS))
        for job in workflow["jobs"].values():
            for step in job["steps"]:
                assert "${{" not in step.get("run", ""), (name, step)  # no expression is pasted into a shell
    review = workflows["sparkguard.yml"]
    assert _triggers(review) == {"pull_request"}
    assert review["permissions"] == {"contents": "read"}
    [job] = review["jobs"].values()
    assert "permissions" not in job and "secrets" not in json.dumps(job) and "token" not in json.dumps(job).lower()
    checkout = [step for step in job["steps"] if step.get("uses", "").startswith("actions/checkout")]
    assert [step["with"]["persist-credentials"] for step in checkout] == [False]  # no token left in .git/config
    [upload] = [step for step in job["steps"] if step.get("uses", "").startswith("actions/upload-artifact")]
    assert upload["with"]["path"] == "${{ runner.temp }}/sparkguard/review.md" and upload["if"] == "always()"


def test_the_github_comment_job_never_checks_out_nor_runs_pr_code(ops):
    review = _load(ops / ".github/workflows/sparkguard.yml")
    comment = _load(ops / ".github/workflows/sparkguard-comment.yml")
    assert comment["on"] == {"workflow_run": {"workflows": [review["name"]], "types": ["completed"]}}
    assert comment["permissions"] == {}
    [job] = comment["jobs"].values()
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    assert job["if"] == "github.event.workflow_run.event == 'pull_request'"
    assert all("uses" not in step for step in job["steps"])  # no action at all: no checkout
    script = "\n".join(step["run"] for step in job["steps"])
    for never in ("git ", "checkout", "pip install", ".sparkguard", "requirements", "eval", "source ", ". ./", "bash -c",
                  "sh -c", "xargs"):
        assert never not in script, never
    assert "python3 -I -" in script and "--body-file" in script
    assert init_command.POST_FORMAT.splitlines()[0] in script


def test_the_gitlab_review_job_references_no_token_and_the_note_job_runs_no_mr_code(ops):
    text = (ops / ".gitlab-ci.yml").read_text()
    ci = yaml.safe_load(text)
    assert ci["stages"] == ["review", "note"]
    review, note = ci["sparkguard-review"], ci["sparkguard-note"]
    body = json.dumps(review)
    assert not re.search(r"TOKEN|PASSWORD|SECRET|secrets|id_tokens", body, re.I), body
    assert "environment" not in review and review["stage"] == "review"
    assert review["artifacts"]["paths"] == ["sparkguard-review/review.md"]
    assert note["stage"] == "note" and note["variables"] == {"GIT_STRATEGY": "none"}
    assert note["environment"] == {"name": "sparkguard-note", "action": "access"}
    assert note["needs"] == [{"job": "sparkguard-review", "artifacts": True}]
    assert [rule["when"] for rule in note["rules"]] == ["always"]
    script = "\n".join(note["script"])
    for never in ("git ", "pip install", ".sparkguard", "requirements", "eval", "source ", "sh -c"):
        assert never not in script, never
    assert script.startswith("python3 -I - ") and init_command.POST_FORMAT.splitlines()[0] in script
    # the token's guidance is in the file the operator edits
    header = text.split("\nstages:")[0]
    for words in ("project access token", "scope api", "protected", "masked", "environment scope sparkguard-note"):
        assert words in header, words


def test_the_generated_yaml_passes_the_published_schemas(ops):
    check = Path(sys.executable).parent / "check-jsonschema"
    if not check.exists():
        pytest.skip("check-jsonschema is not installed (pip install check-jsonschema: its schemas are built in, "
                    "no network needed)")
    for schema, files in (("vendor.github-workflows", sorted((ops / ".github/workflows").glob("*.yml"))),
                          ("vendor.gitlab-ci", [ops / ".gitlab-ci.yml"])):
        done = subprocess.run([str(check), "--builtin-schema", schema, *map(str, files)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, (schema, done.stdout + done.stderr)
    # and the schemas have teeth: a job with an unknown key is refused
    broken = ops.parent / "broken.yml"
    broken.write_text((ops / ".gitlab-ci.yml").read_text().replace("  stage: note\n", "  stage: note\n  scrpt: x\n"))
    done = subprocess.run([str(check), "--builtin-schema", "vendor.gitlab-ci", str(broken)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
