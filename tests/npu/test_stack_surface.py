"""Every name the env profile can emit exists in each supported vLLM / vllm-ascend release.

The surfaces are the committed snapshots in verl/ascend/stack_snapshots/, generated from the
released sources by scripts/ascend_stack_snapshot.py (refresh: see that script's docstring and
docs/ascend_tutorial/npu_backend.md). A failure here means the profile table emits a variable or
an additional_config key that a supported release does not read: it would do nothing there.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf, open_dict

from verl.ascend import stack
from verl.ascend.env import compose_config
from verl.ascend.env_profile import evaluate_env_profile, load_table
from verl.ascend.stack_source import snapshot

REPO = Path(__file__).resolve().parents[2]
VA = "vllm-ascend"


def declared(package: str, version: str) -> dict:
    return {stack.ENV_KEY[package]: version}


@pytest.mark.parametrize("package", sorted(stack.PACKAGES))
def test_supported_releases_have_snapshots(package):
    assert stack.PINNED[package] in stack.supported_versions(package)
    if package == VA:  # the route change of mc2 must stay covered
        assert {"0.23.0", "0.25.1rc1"} <= set(stack.supported_versions(package))


@pytest.mark.parametrize(
    "package,version", [(p, v) for p in sorted(stack.PACKAGES) for v in stack.supported_versions(p)]
)
def test_profile_emits_only_names_the_release_defines(package, version):
    found = stack.surface(package, None, declared(package, version))
    assert found.version == version and f"{package}-{version}.yaml" in found.source
    assert stack.missing_names(load_table(), package, found) == []


def test_the_check_fails_on_names_a_release_lacks():
    """The same check, on a table that still emits the removed names, reports each of them."""
    table = copy.deepcopy(load_table())
    table["variables"].append({"name": "VLLM_USE_V1", "consumer": "vllm", "roles": ["rollout"]})
    table["variables"].append({"name": "VLLM_ASCEND_ENABLE_PREFETCH_MLP", "consumer": VA, "roles": ["rollout"]})
    vllm = stack.surface("vllm", None, declared("vllm", "0.23.0"))
    assert stack.missing_names(table, "vllm", vllm) == ["VLLM_USE_V1"]
    old = stack.surface(VA, None, declared(VA, "0.23.0"))
    assert stack.missing_names(table, VA, old) == ["VLLM_ASCEND_ENABLE_PREFETCH_MLP"]
    new = stack.surface(VA, None, declared(VA, "0.25.1rc1"))
    assert "additional_config.enable_matmul_allreduce" in stack.missing_names(table, VA, new, gated=False)


@pytest.fixture(scope="module")
def npu_32b():
    return compose_config("dapo_qwen25_32b_npu", [])


def resolve(config, version, **overrides):
    cfg = copy.deepcopy(config)
    with open_dict(cfg):
        for key, value in overrides.items():
            OmegaConf.update(cfg, key, value, force_add=True)
    return evaluate_env_profile(cfg, declared(VA, version))


@pytest.mark.parametrize("version", stack.supported_versions(VA))
@pytest.mark.parametrize("mc2", ["auto", True, False])
def test_emitted_additional_config_keys_exist_in_each_release(npu_32b, version, mc2):
    profile, errors = resolve(npu_32b, version, **{"ascend.env.mc2": mc2})
    keys = stack.surface(VA, None, declared(VA, version)).additional_config_keys
    assert set(profile.additional_config) <= keys
    if mc2 is True and "enable_matmul_allreduce" not in keys:
        assert [e.rule for e in errors] == ["switch_unavailable"] and "ascend.env.mc2" in errors[0].keys
    else:
        assert errors == []


@pytest.mark.parametrize("version,mc2", [("0.23.0", True), ("0.24.0rc1", True), ("0.25.1rc1", False)])
def test_mc2_route_per_release_and_aiv_takes_over(npu_32b, version, mc2):
    profile, errors = resolve(npu_32b, version)
    assert errors == []
    assert profile.additional_config_values() == ({"enable_matmul_allreduce": True} if mc2 else {})
    assert ("HCCL_OP_EXPANSION_MODE" in profile.rollout_env_vars()) is (not mc2)
    if not mc2:
        (note,) = profile.notes
        assert "not available on target vllm-ascend 0.25.1rc1" in note and "#12119" in note


def test_a_newer_release_without_snapshot_uses_the_nearest_older_one(npu_32b):
    profile, errors = resolve(npu_32b, "0.26.0")
    assert errors == [] and "nearest release <= 0.26.0" in profile.stack[VA].source
    assert profile.additional_config == {}  # as on 0.25.1rc1


def test_declared_version_must_be_a_version(npu_32b):
    _profile, errors = resolve(npu_32b, "newest")
    assert [e.keys for e in errors] == [("ascend.stack.vllm_ascend",)]


def test_snapshot_reader_on_release_shaped_sources():
    """The generator's reader on a small source tree laid out like vllm-ascend's."""
    files = {
        "vllm_ascend/envs.py": "env_variables: dict = {\n  'VLLM_ASCEND_X': lambda: 1,\n  'MAX_JOBS': None,\n}\n",
        "vllm_ascend/ascend_config.py": (
            "class AscendConfig:\n"
            "    def __init__(self, vllm_config):\n"
            "        additional_config = vllm_config.additional_config or {}\n"
            "        self.a = additional_config.get('key_a', False)\n"
            "        self.b = self._get_config_value(additional_config, 'key_b', 'VLLM_ASCEND_X', False)\n"
            "        self.c = 'key_c' in vllm_config.additional_config\n"
            "        self.d = additional_config['key_d']\n"
            "        self.nested = additional_config.get('outer', {}).get('not_top_level')\n"
        ),
    }
    data = snapshot(VA, "9.9.9", files, "test")
    assert data["env_vars"] == ["MAX_JOBS", "VLLM_ASCEND_X"]
    assert data["additional_config_keys"] == ["key_a", "key_b", "key_c", "key_d", "outer"]
    assert data["env_fallbacks"] == {"VLLM_ASCEND_X": "key_b"}


@pytest.mark.parametrize("path", sorted((REPO / "verl/ascend/stack_snapshots").glob("*.yaml")), ids=lambda p: p.name)
def test_committed_snapshots_say_where_they_come_from(path):
    data = yaml.safe_load(path.read_text())
    assert data["generated_by"] == "scripts/ascend_stack_snapshot.py"
    assert data["source"].startswith(("sdist ", "git tag v"))
    assert path.name == f"{data['package']}-{data['version']}.yaml" and data["env_vars"]


def test_install_acceptance_check_fails_on_a_machine_without_the_npu_set():
    result = subprocess.run(
        [sys.executable, "-m", "verl.ascend.stack"], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert result.returncode == 1
    assert "MISMATCH torch-npu: installed none, expected 2.10.0.post4" in result.stdout
    assert "ok       verl: installed 0.9.1" in result.stdout and "stack check: FAILED" in result.stdout
