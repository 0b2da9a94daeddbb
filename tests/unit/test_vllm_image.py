"""Role vllm: the container image by device profile, and what unified-memory nodes add to the unit.

Docker Hub's vllm/vllm-openai of the pinned release is amd64-only: on the
aarch64 profiles (dgx-spark, gh200, jetson) the inventory must name an image,
and an `auto` node that turns out to be aarch64 is refused on apply.
"""

from __future__ import annotations

import pytest

from sparkguard.engine.render import host_states
from sparkguard.errors import ConfigError
from sparkguard.facts import NodeInfo
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.vllm.checks import preflight
from sparkguard.roles.vllm.images import DOCKER_HUB_IMAGE

MODEL = "m: {model: org/m, weights_gib: 1, kv_cache_gib: 1, shared_kv_cache_gib: 0.5, runtime_overhead_gib: 0.5}"


def inventory(inventory_dir, profile: str, vllm: str = ""):
    return inventory_dir(f"""\
        all:
          hosts:
            h:
              ssh_host: 192.0.2.1
              node: {{device_profile: {profile}, memory_total_gib: 121.7}}
              vllm: {{cuda_total_gib: 119.6, models: {{{MODEL}}}{vllm}}}
        """)


def unit(path) -> str:
    states = host_states(load_inventory(path).host("h"))
    files = {f.path: f.content for s in states for f in s.files}
    return files["/etc/systemd/system/sparkguard-vllm@.service"]


@pytest.mark.parametrize("profile", ["dgx-spark", "gh200", "jetson"])
def test_aarch64_profiles_need_an_image(inventory_dir, profile):
    with pytest.raises(ConfigError) as error:
        load_inventory(inventory(inventory_dir, profile))
    message = str(error.value)
    assert "vllm.image" in message and f"device profile {profile}" in message and "amd64-only" in message
    assert "host 'h'" in message


@pytest.mark.parametrize("profile,vllm,image", [
    ("dgx-spark", ", image: 'nvcr.io/nvidia/vllm:25.11-py3'", "nvcr.io/nvidia/vllm:25.11-py3"),
    ("discrete", "", DOCKER_HUB_IMAGE),
    ("auto", "", DOCKER_HUB_IMAGE),
])
def test_image_in_the_unit(inventory_dir, profile, vllm, image):
    text = unit(inventory(inventory_dir, profile, vllm))
    assert f" {image} serve --config" in text


def test_native_runtime_needs_no_image(inventory_dir):
    text = unit(inventory(inventory_dir, "dgx-spark", ", runtime: native"))
    assert "docker" not in text.split("[Service]")[1]


@pytest.mark.parametrize("arch,refused", [("aarch64", True), ("arm64", True), ("x86_64", False)])
def test_auto_profile_on_an_aarch64_node_is_refused_on_apply(inventory_dir, arch, refused):
    config = load_inventory(inventory(inventory_dir, "auto")).host("h").config
    problems = list(preflight(config, NodeInfo(memory_total_bytes=121 * 2**30, arch=arch)))
    assert any(p.field == "vllm.image" for p in problems) is refused


@pytest.mark.parametrize("profile,vllm,drops", [
    ("dgx-spark", ", image: 'nvcr.io/nvidia/vllm:25.11-py3'", True),
    ("amd-apu", "", True),
    ("discrete", "", False),
    ("auto", "", False),
])
def test_unified_memory_drops_clean_page_cache_before_start(inventory_dir, profile, vllm, drops):
    text = unit(inventory(inventory_dir, profile, vllm))
    assert ("ExecStartPre=-+/bin/sh -c 'sync; echo 1 > /proc/sys/vm/drop_caches'" in text) is drops
