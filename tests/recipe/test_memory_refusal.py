"""The launch refuses a job whose planned memory exceeds its card before Ray (the real entry point
in-process, Ray replaced by a stub that counts starts), and starts the same job once it fits."""

from __future__ import annotations


def test_a_job_over_its_card_is_refused_before_ray_naming_phase_and_keys(entry, tmp_path):
    r = entry("memory.device_gib=0.001")  # 1 MiB cards: the tiny model's update needs more
    text = r.stdout + r.stderr
    assert r.returncode == 2, text[-3000:]
    assert "memory_exceeds_device" in text and "does not fit: phase '" in text and "keys that change it:" in text
    assert "memory.device_gib" in text and "Traceback" not in text
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_the_same_job_edited_to_fit_starts(entry):
    r = entry("memory.device_gib=1")
    assert r.returncode == 0 and len(entry.started) == 1, (r.stdout + r.stderr)[-3000:]
