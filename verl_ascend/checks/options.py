"""The validation pipeline's config section ``doctor``, declared once (``verl_ascend/sections.py``)."""

from __future__ import annotations

from dataclasses import dataclass

from verl_ascend.sections import Section, boolean, key


@dataclass(frozen=True)
class DoctorOptions(Section):
    """``doctor.*``: how the checks' verdict treats warnings."""

    SECTION = "doctor"

    # Warnings refuse too, as with --strict or VERL_ASCEND_DOCTOR_STRICT=1 (read by verl_ascend/launch/__init__.py).
    strict: bool = key(False, "true or false", boolean)
