"""Our own config keys in the recipe's YAML match their one declaration (``verl_ascend/sections.py``):
dapo_base.yaml sets every declared key to its declared default, and every shipped config that sets
keys of a declared section sets only declared keys, to accepted values."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_ascend import sections

CONFIG_DIR = Path(__file__).resolve().parents[2] / "recipe" / "dapo_ascend" / "config"
SHIPPED = sorted(p for p in CONFIG_DIR.rglob("*.yaml"))
ABSENT = sections.ABSENT
_at = sections.lookup  # (a YAML tree, dotted key) -> the value there, or ABSENT


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _same(value, default) -> bool:
    if isinstance(default, bool) or default is None:
        return value is default
    kinds = (int, float) if isinstance(default, float) else (type(default),)
    return isinstance(value, kinds) and not isinstance(value, bool) and value == default


def drift(base: dict, section) -> list[str]:
    """Keys of ``section`` that ``base`` (a YAML tree) lacks or sets to another value than declared."""
    out = []
    for dotted, default, _ in section.keys():
        value = _at(base, dotted)
        if value is ABSENT:
            out.append(f"{dotted}: missing (declared default {default!r})")
        elif not _same(value, default):
            out.append(f"{dotted}={value!r}: declared default {default!r} ({section.__module__})")
    return out


@pytest.mark.parametrize("section", sections.declared(), ids=lambda s: s.SECTION)
def test_dapo_base_sets_every_declared_key_to_its_declared_default(section):
    assert drift(_load(CONFIG_DIR / "dapo_base.yaml"), section) == []


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_each_shipped_config_sets_only_declared_keys_to_accepted_values(path):
    tree = _load(path)
    config = OmegaConf.create(tree)
    for section in sections.declared():
        assert section.problems(config) == [], f"{path.name}: {section.SECTION}"


def test_a_drifted_copy_is_caught():
    """The comparison above can fail: a changed, a retyped and a missing default are each found."""
    from verl_ascend.run.options import FaultTolerance

    base = _load(CONFIG_DIR / "dapo_base.yaml")
    base["fault_tolerance"].update(rollout_timeout_s=900, check_free_space=1)
    del base["fault_tolerance"]["new_data_order"]
    assert drift(base, FaultTolerance) == [
        "fault_tolerance.rollout_timeout_s=900: declared default 1800.0 (verl_ascend.run.options)",
        "fault_tolerance.check_free_space=1: declared default True (verl_ascend.run.options)",
        "fault_tolerance.new_data_order: missing (declared default False)",
    ]


def test_host_cpu_restated_in_the_32b_job_equals_the_backends_default_and_takes_an_override():
    """The 32B config restates the backend's default only so that a plain override reaches it."""
    from hydra import compose, initialize_config_dir

    from verl.ascend.env.profile import DEFAULTS_PATH, ascend_settings

    default = yaml.safe_load(DEFAULTS_PATH.read_text())["ascend"]["env"]["host_cpu"]
    for path in SHIPPED:
        restated = _at(_load(path), "ascend.env.host_cpu")
        assert restated is ABSENT or restated == default, (path.name, restated, default)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        job = compose(config_name="dapo_qwen25_32b_npu", overrides=["ascend.env.host_cpu=aarch64"])
    assert ascend_settings(job)["host_cpu"][0] == "aarch64"
