"""sparkguard init: an operator repository that validates, plans and renders as written, and whose CI
review script shows what a change does to the nodes (secrets masked), run here in a real git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import INIT_PIN, run_cli

BIN = str(Path(sys.executable).parent)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "op", "GIT_AUTHOR_EMAIL": "op@example.org",
           "GIT_COMMITTER_NAME": "op", "GIT_COMMITTER_EMAIL": "op@example.org"}
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def repo(tmp_path) -> Path:
    done = run_cli("init", *INIT_PIN, str(tmp_path / "ops-repo"), "--host", "gpu-01=192.0.2.21", "--host", "gpu-02=192.0.2.22")
    assert done.returncode == 0, done.stderr
    return tmp_path / "ops-repo"


def test_the_scaffold_validates_plans_and_renders(repo):
    inventory = repo / "inventory" / "prod"
    assert "2 host(s) valid: gpu-01, gpu-02" in run_cli("validate", str(inventory)).stdout
    assert "verdict: FITS" in run_cli("plan", str(inventory)).stdout
    assert run_cli("render", str(inventory), "--out", str(repo.parent / "r")).returncode == 0
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())
    assert hosts["all"]["children"]["dgx_spark"]["vars"]["node"] == {"device_profile": "dgx-spark", "memory_total_gib": 121.7}
    assert (repo / "requirements.txt").read_text().splitlines()[-1] == "sparkguard @ " + INIT_PIN[1]
    for workflow in (repo / ".github/workflows/sparkguard.yml", repo / ".gitlab-ci.yml"):
        text = workflow.read_text()
        assert yaml.safe_load(text) and ".sparkguard/review.sh inventory/prod" in text and "INVENTORY" not in text
    # the comment is posted by a workflow of its own (tests/unit/test_init_redteam.py: who holds what)
    assert yaml.safe_load((repo / ".github/workflows/sparkguard-comment.yml").read_text())["name"] == "sparkguard comment"


def test_init_never_overwrites_and_refuses_bad_names(repo, tmp_path):
    again = run_cli("init", *INIT_PIN, str(repo))
    assert again.returncode == 2 and "already exists" in again.stderr and "hosts.yml" in again.stderr
    bad = run_cli("init", *INIT_PIN, str(tmp_path / "other"), "--host", "../etc=192.0.2.1")
    assert bad.returncode == 2 and "--host" in bad.stderr and not (tmp_path / "other").exists()
    unknown = run_cli("init", *INIT_PIN, str(tmp_path / "gh"), "--profile", "gh200")
    assert unknown.returncode == 2 and "--memory-total-gib" in unknown.stderr


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_the_review_script_shows_the_change_and_no_secret(repo, tmp_path):
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fleet")
    git(repo, "checkout", "-qb", "raise-the-line")
    (repo / "inventory/prod/group_vars/dgx_spark.yml").write_text(
        "earlyoom: {term_percent: 9}\n"
        "monitoring: {enabled: true, alertmanager: {webhook_url: 'https://hooks.example.org/T0KEN-SECRET'}}\n")
    git(repo, "commit", "-qam", "raise earlyoom's line, page the team")
    out = tmp_path / "review"
    done = subprocess.run([str(repo / ".sparkguard/review.sh"), "inventory/prod", "main", str(out)], cwd=repo,
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert done.returncode == 0, done.stdout + done.stderr
    review = (out / "review.md").read_text()
    assert "-m 8,4" in review and "-m 9,4" in review           # the earlyoom line, before and after
    assert "+++ head/gpu-01/etc/prometheus/prometheus.yml" in review  # monitoring switched on
    assert "T0KEN-SECRET" not in review and "<secret>" in review
    assert "verdict: FITS" in review
    # what changes where comes first: a comment cut at GitHub's 65,536 characters still names every host
    summary = review.split("files changed, per host", 1)[1].split("\n\n", 1)[0]
    assert "  gpu-01: " in summary and "  gpu-02: " in summary and review.index("gpu-01: ") < review.index("--- base/")
    assert git(repo, "worktree", "list").count("\n") == 1     # the base's worktree is gone
    assert sorted(p.name for p in out.iterdir()) == ["review.md"]  # renders and plan stayed in a temporary directory
    headers = [line for line in review.splitlines() if line.startswith(("--- base/", "+++ head/"))]
    assert headers and not any("\t" in line for line in headers)  # no file times: the same change, the same review

    (repo / "inventory/prod/group_vars/dgx_spark.yml").write_text("earlyoom: {term_percent: 200}\n")
    broken = subprocess.run([str(repo / ".sparkguard/review.sh"), "inventory/prod", "main", str(tmp_path / "r2")],
                            cwd=repo, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    assert broken.returncode != 0 and "earlyoom.term_percent" in broken.stderr
    refused = (tmp_path / "r2/review.md").read_text()  # the review says what was refused, for the comment
    assert refused.startswith("sparkguard review of inventory/prod: REFUSED: the change does not validate")
    assert "earlyoom.term_percent" in refused and sorted(p.name for p in (tmp_path / "r2").iterdir()) == ["review.md"]


def test_init_writes_the_same_files_every_time(tmp_path):
    for name in ("a", "b"):
        assert run_cli("init", *INIT_PIN, str(tmp_path / name)).returncode == 0
    written = {name: {p.relative_to(tmp_path / name): p.read_bytes() for p in sorted((tmp_path / name).rglob("*"))
                      if p.is_file()} for name in ("a", "b")}
    assert written["a"] == written["b"] and Path(".github/workflows/sparkguard-comment.yml") in written["a"]


@pytest.mark.parametrize("ci, written, absent", [
    ("github", [".github/workflows/sparkguard.yml", ".github/workflows/sparkguard-comment.yml"], [".gitlab-ci.yml"]),
    ("gitlab", [".gitlab-ci.yml"], [".github"]),
    ("none", [], [".github", ".gitlab-ci.yml"]),
])
def test_ci_writes_only_the_chosen_platform(tmp_path, ci, written, absent):
    root = tmp_path / "r"
    done = run_cli("init", *INIT_PIN, str(root), "--ci", ci)
    assert done.returncode == 0, done.stderr
    for name in written:
        assert (root / name).is_file(), name
    for name in absent:
        assert not (root / name).exists(), name
    assert (root / ".sparkguard/review.sh").is_file()   # the review runs from any CI


def test_a_repository_with_its_own_ci_is_pointed_at_ci_none_or_the_other_platform(tmp_path):
    root = tmp_path / "has-gitlab"
    root.mkdir()
    (root / ".gitlab-ci.yml").write_text("stages: [build]\n")
    refused = run_cli("init", *INIT_PIN, str(root))
    assert refused.returncode == 2 and ".gitlab-ci.yml" in refused.stderr and "--ci none" in refused.stderr
    assert run_cli("init", *INIT_PIN, str(root), "--ci", "github").returncode == 0
    assert (root / ".gitlab-ci.yml").read_text() == "stages: [build]\n"       # theirs, untouched


def test_the_pyinfra_adapter_is_written_and_reads_the_inventory(repo):
    """The README's plain pyinfra path: INVENTORY/inventory.py gives pyinfra the validated hosts and groups."""
    import runpy

    adapter = repo / "inventory/prod/inventory.py"
    groups = runpy.run_path(str(adapter))
    hosts, _ = groups["all"]
    assert [name for name, _data in hosts] == ["gpu-01", "gpu-02"]
    assert groups["dgx_spark"] == ["gpu-01", "gpu-02"]


def test_the_pin_names_a_source_pip_can_install_never_a_bare_name(tmp_path):
    """No --pin and no checkout to name: refused with the forms that work; a wheel is copied in and pinned by
    path; a git URL without a commit is refused."""
    from sparkguard.cli.init_pin import _vcs_url

    assert _vcs_url("git@github.com:org/sparkguard.git") == "git+ssh://git@github.com/org/sparkguard.git"
    assert _vcs_url("https://user:token@example.org/sg.git") is None      # never a credential in a pin
    wheel = tmp_path / "sparkguard-0.2.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x03\x04 a wheel")
    done = run_cli("init", str(tmp_path / "w"), "--pin", str(wheel), "--ci", "none")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "w/requirements.txt").read_text().splitlines()[-1] == \
        "./.sparkguard/wheels/sparkguard-0.2.0-py3-none-any.whl"
    assert (tmp_path / "w/.sparkguard/wheels" / wheel.name).read_bytes() == wheel.read_bytes()
    hostile = tmp_path / "sparkguard-0.2.0-py3-none-any\n--index-url https:x.whl"
    hostile.write_bytes(b"PK")
    for bad in ("git+https://example.org/sparkguard.git", "sparkguard==0.2.0", str(tmp_path / "nope.whl"),
                str(hostile), "git+https://example.org/sg.git@main\n--index-url https://evil"):
        refused = run_cli("init", str(tmp_path / "r"), "--pin", bad)
        assert refused.returncode == 2 and "--pin" in refused.stderr and not (tmp_path / "r").exists(), bad


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_without_a_pin_init_names_this_checkouts_origin_and_commit(tmp_path):
    """Run from a clone (as CI and a pipx install of a clone do): the pin is git+<origin>@<HEAD>."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", str(origin))
    clone = tmp_path / "clone"
    shutil.copytree(Path(__file__).resolve().parents[2] / "sparkguard", clone / "sparkguard")
    git(clone, "init", "-q", "-b", "main")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "sparkguard")
    git(clone, "remote", "add", "origin", str(origin))
    head = git(clone, "rev-parse", "HEAD").strip()
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import sparkguard.cli.init_pin as p; "
            "import sparkguard.paths as paths; print(p._git_pin(Path(sys.argv[1])).line)")
    done = subprocess.run([sys.executable, "-c", code, str(clone)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"sparkguard @ git+file://{origin}@{head}"
