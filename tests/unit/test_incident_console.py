"""The incident replay reads a hung node's story from its serial console (tests/vm/incident.py read_console)."""

from __future__ import annotations

from tests.vm.incident import read_console

CONSOLE = (
    "[   10.000000] systemd[1]: Started sg-sampler.service.\n"
    "SGS 1796530000.00 100.00 900000 524284 524284 0\n"
    "SGS 1796530001.00 101.00 120000 524284 400000 300\n"
    "[  101.500000] python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0\n"
    "SGS 17965300[  101.600000] Out of memory: Killed process 812 (VLLM::EngineCor) total-vm:300000kB\n"
    "SGS 1796530002.00 102.00 40000 524284 0 400\n"
)


def test_samples_and_kernel_kills_come_back_from_the_console_with_host_times():
    samples, kernel = read_console(CONSOLE)
    assert samples == [(1796530000.0, 900000, 524284, 524284, 0), (1796530001.0, 120000, 524284, 400000, 300),
                       (1796530002.0, 40000, 524284, 0, 400)]          # the line a kernel message cut is dropped
    assert [line.split(" ", 1)[0] for line in kernel] == ["1796530001.50", "1796530001.60"]
    assert "Killed process 812 (VLLM::EngineCor)" in kernel[1] and "invoked oom-killer" in kernel[0]
