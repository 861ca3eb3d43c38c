"""The plan's config section ``memory``, declared once (``verl_ascend/sections.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from verl_ascend.sections import Section, boolean, key, positive_number


def _fraction_below_one(v) -> bool:
    from verl_ascend.sections import number

    n = number(v)
    return n is not None and 0 <= n < 1


@dataclass(frozen=True)
class MemoryOptions(Section):
    """``memory.*``: what the memory plan holds the job against, and what it assumes about responses."""

    SECTION = "memory"

    # Refuse (doctor, DRY_RUN=1, the launch) a config whose planned peak exceeds the device's memory.
    check: bool = key(True, "true or false", boolean)
    # Which of the device's declared cards (the backend's DeviceHooks.memory_devices; npu: 910b, a3).
    device: str = key("auto", "auto or a card the backend declares (npu: 910b, a3; cpu: host)",
                      lambda v: isinstance(v, str) and bool(v.strip()))
    # The card's memory in GiB, overriding the backend's declaration (e.g. a card with less visible memory).
    device_gib: float = key(None, "a positive number of GiB", positive_number, null="the device's declaration")
    # Below this share of the card left free at a phase's peak the checks warn (fragmentation, allocator
    # caching, the sleep/wake leak of vllm-ascend #9563): see docs/ascend_tutorial/memory.md.
    warn_headroom: float = key(0.05, "a fraction in [0, 1)", _fraction_below_one)
    # Mean response length for the rollout's concurrency (the article's DAPO job: ~4K tokens).
    mean_response_length: float = key(None, "a positive number of tokens", positive_number,
                                    null="half of data.max_response_length")
