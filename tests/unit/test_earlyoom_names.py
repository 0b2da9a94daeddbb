"""earlyoom's --prefer/--avoid regexes against real comm strings.

Matched with `grep -E` (POSIX ERE via regcomp, the same engine earlyoom uses),
after the same unquoting systemd applies to /etc/default/earlyoom. The comm
strings are real: PyTorch's thread names (pytorch#133690, #128448), vLLM's
engine (`VLLM::EngineCore`), and the 15-character truncations the kernel makes.
"""

from __future__ import annotations

import subprocess

import pytest

from roles.earlyoom.names import avoid_regex, fragment_problem, prefer_regex

TRAINING_COMMS = ["pt_main_thread", "pt_elastic", "pt_data_worker", "python", "python3", "python3.11",
                  "python3.12", "torchrun", "accelerate", "deepspeed"]
NOT_TRAINING = ["VLLM::EngineCore", "vllm", "sshd", "python3x11", "python3.", "mypython3", "python3.11-dbg",
                "pt_main_thread2", "dockerd", "prometheus", "ollama", "tritonserver"]
PROTECTED = ["sshd", "sshd-session", "systemd", "systemd-journal", "systemd-logind", "dbus-daemon", "earlyoom",
             "prometheus", "prometheus-node", "node_exporter", "containerd", "dockerd"]
NOT_PROTECTED = ["pt_main_thread", "python3", "VLLM::EngineCore", "sshd2", "systemd-udevd", "containerd-shim",
                 "sshd-sessionx", "my-prometheus"]


def ere_matches(regex: str, names: list[str]) -> set[str]:
    result = subprocess.run(["grep", "-Ex", "-e", regex.removeprefix("^").removesuffix("$")],
                            input="\n".join(names) + "\n", capture_output=True, text=True)
    assert result.returncode in (0, 1), result.stderr
    return set(result.stdout.split())


def ere_search(regex: str, names: list[str]) -> set[str]:
    """Unanchored search, as earlyoom's regexec does: the anchors in the regex must do the work."""
    result = subprocess.run(["grep", "-E", "-e", regex], input="\n".join(names) + "\n",
                            capture_output=True, text=True)
    return set(result.stdout.split())


def test_prefer_matches_training_processes():
    assert ere_search(prefer_regex(), TRAINING_COMMS) == set(TRAINING_COMMS)


def test_prefer_never_matches_vllm_or_system():
    assert ere_search(prefer_regex(), NOT_TRAINING) == set()


def test_avoid_covers_sshd_journald_monitoring():
    assert ere_search(avoid_regex(), PROTECTED) == set(PROTECTED)
    assert ere_search(avoid_regex(), NOT_PROTECTED) == set()


def test_extra_names_join_the_lists():
    assert ere_search(prefer_regex(("my_trainer",)), ["my_trainer", "my_trainer2"]) == {"my_trainer"}
    assert ere_search(avoid_regex(("vllm", "VLLM::EngineCore")), ["vllm", "VLLM::EngineCore"]) == {
        "vllm", "VLLM::EngineCore"}


def test_regexes_survive_systemd_environment_file_quoting():
    for regex in (prefer_regex(), avoid_regex()):
        assert "\\" not in regex and "'" not in regex and '"' not in regex


@pytest.mark.parametrize("fragment,reason", [
    ("python3\\.11", "backslashes"),
    ("a b", "spaces"),
    ("(unclosed", "not a valid regular expression"),
    ("", "empty"),
    (".*", "empty string"),
])
def test_bad_fragments_are_refused(fragment, reason):
    assert reason in fragment_problem(fragment)


def test_good_fragment():
    assert fragment_problem("my_trainer[0-9]*x") is None


def test_plain_python_can_be_left_out_for_python3_servers():
    regex = prefer_regex(plain_python=False)
    assert ere_search(regex, TRAINING_COMMS) == {"pt_main_thread", "pt_elastic", "pt_data_worker", "torchrun",
                                                 "accelerate", "deepspeed"}
