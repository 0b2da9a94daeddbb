"""Which container image serves vLLM on which device profile.

Docker Hub's ``vllm/vllm-openai`` images of the release pinned here (0.11.0) are
built for amd64 only: on an aarch64 node (DGX Spark's GB10, GH200, Jetson Thor)
``docker run`` fails with "exec format error", and a CUDA build without sm_121 /
sm_90 kernels would not run on those GPUs anyway. NVIDIA publishes aarch64
vLLM containers built for them (nvcr.io/nvidia/vllm:YY.MM-py3); their tags
follow NGC's release calendar, not vLLM's version, so the operator pins the
one whose vLLM matches ``VLLM_VERSION`` (``docker run --rm IMAGE vllm --version``).
sparkguard therefore has no default there: it asks.
"""

from __future__ import annotations

from .options import VLLM_VERSION

DOCKER_HUB_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
# Device profiles whose nodes are aarch64: no Docker Hub image of the pinned release runs there.
ARM64_PROFILES = frozenset({"dgx-spark", "gh200", "jetson"})
ARM64_MACHINES = frozenset({"aarch64", "arm64"})
NGC_EXAMPLE = "nvcr.io/nvidia/vllm:25.11-py3"


def default_image(device_profile: str) -> str | None:
    """The image used when the inventory sets none; None where the operator must choose."""
    return None if device_profile in ARM64_PROFILES else DOCKER_HUB_IMAGE


def missing_image_reason(where: str) -> str:
    return (f"is required on {where}: Docker Hub's {DOCKER_HUB_IMAGE} is amd64-only. Set NVIDIA's aarch64 vLLM"
            f" container built for this GPU (GB10 sm_121, GH200 sm_90), pinned to the tag whose vLLM is"
            f" {VLLM_VERSION}, e.g. vllm.image: {NGC_EXAMPLE} (check: docker run --rm IMAGE vllm --version),"
            f" or use vllm.runtime: native")
