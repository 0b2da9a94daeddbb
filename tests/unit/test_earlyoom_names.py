"""earlyoom's --prefer/--avoid regexes against real comm strings.

Matched with `grep -E` (POSIX ERE via regcomp, the same engine earlyoom uses),
after the same unquoting systemd applies to /etc/default/earlyoom. The comm
strings are real: PyTorch's thread names (pytorch#128448; pt_main_thread only
in torch 2.3-2.4, removed by pytorch#134066), vLLM's engine (`VLLM::EngineCore`,
comm `VLLM::EngineCor`), and the 15-character truncations the kernel makes.
"""

from __future__ import annotations

import subprocess

import pytest

from sparkguard.roles.earlyoom.names import avoid_regex, fragment_problem, prefer_regex, serving_regex

# comm values as the kernel reports them (15 characters at most).
TRAINING_COMMS = ["pt_elastic", "pt_main_thread", "accelerate", "deepspeed", "tune", "axolotl", "llamafactory-cl"]
# Workers hold no memory of their own (their rank does) and `torchrun` is never a comm (it names itself
# pt_elastic): a name bonus on them would send the first SIGTERM to the wrong process.
NOT_PREFERRED_TRAINING = ["pt_data_worker", "torchrun"]
PYTHON_COMMS = ["python", "python3", "python3.11", "python3.12"]
NOT_TRAINING = ["VLLM::EngineCor", "VLLM::Worker_TP", "vllm", "sshd", "python3x11", "python3.", "mypython3",
                "python3.11-dbg", "pt_main_thread2", "dockerd", "prometheus", "ollama", "tritonserver",
                "gpu-ranking", "llama-server"]
# vLLM, ollama (server and runners), llama.cpp, SGLang (setproctitle), TensorRT-LLM, Triton, TGI (truncated).
SERVING_COMMS = ["vllm", "VLLM::EngineCor", "VLLM::Worker_TP", "ollama", "llama-server", "sglang::schedul",
                 "sglang::detoken", "trtllm-serve", "tritonserver", "text-generation"]
NOT_SERVING = ["vllm2", "myvllm", "VLLM::", "python3", "pt_elastic", "ollama2", "llama-cli", "sglang", "llama-server.x"]
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


def test_prefer_never_names_a_worker_or_a_comm_that_does_not_exist():
    assert ere_search(prefer_regex(), NOT_PREFERRED_TRAINING) == set()


def test_current_pytorch_trainer_is_not_preferred_by_name_by_default():
    """torch >= 2.5 keeps comm python3: by default it is found by its GPU memory, not by +300 on its name."""
    assert ere_search(prefer_regex(), PYTHON_COMMS) == set()


def test_plain_python_can_be_preferred_on_a_training_only_node():
    assert ere_search(prefer_regex(plain_python=True), TRAINING_COMMS + PYTHON_COMMS) == set(
        TRAINING_COMMS + PYTHON_COMMS)


def test_prefer_never_matches_vllm_or_system():
    assert ere_search(prefer_regex(), NOT_TRAINING) == set()
    assert ere_search(prefer_regex(plain_python=True), NOT_TRAINING) == set()


def test_serving_names_are_the_inference_servers_only():
    assert ere_search(serving_regex(), SERVING_COMMS) == set(SERVING_COMMS)
    assert ere_search(serving_regex(), NOT_SERVING) == set()


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
