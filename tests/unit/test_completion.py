"""The generated completion scripts complete what the parser knows, in a real bash (and zsh, where installed)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import in_ci, run_cli


def complete(script: str, *words: str) -> list[str]:
    """COMPREPLY for the last word of ``sparkguard WORDS...``, from the script run in a real bash."""
    quoted = " ".join(f"'{w}'" for w in ("sparkguard", *words))
    program = f'{script}\nCOMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _sparkguard; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if line]


@pytest.fixture(scope="module")
def bash_script() -> str:
    done = run_cli("completion", "bash")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("words", "expected"), [
    (("ap",), ["apply"]),
    (("au",), ["audit"]),
    (("apply", "--li"), ["--limit"]),
    (("apply", "--r"), ["--retry-file", "--role"]),
    (("audit", "--j"), ["--json"]),
    (("estimate", "--no-g"), ["--no-gradient-checkpointing"]),
    (("completion", "z"), ["zsh"]),
])
def test_bash_completes_commands_and_their_flags(bash_script, words, expected):
    assert complete(bash_script, *words) == expected


def test_zsh_script_parses():
    done = run_cli("completion", "zsh")
    assert done.returncode == 0 and "bashcompinit" in done.stdout
    if shutil.which("zsh") is None:
        if in_ci():
            pytest.fail("zsh is missing: ./dev.sh install brings it")
        pytest.skip("zsh not installed: the bash part is tested above")
    # In a real zsh with its completion system loaded, the script registers sparkguard's completer.
    program = f"autoload -U compinit && compinit -u\n{done.stdout}\nprint -r -- ${{_comps[sparkguard]}}"
    loaded = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, timeout=30)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "_bash_complete -o filenames -F _sparkguard"

