"""Every name the env profile can emit exists in each supported vLLM / vllm-ascend release.

The surfaces are the committed snapshots in verl/ascend/env/snapshots/, generated from the
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

from verl.ascend.env import stack
from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend.env.profile import evaluate_env_profile, load_table
from verl.ascend.env.stack_source import snapshot

compose_config = RECIPE.compose

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


@pytest.mark.parametrize("path", sorted((REPO / "verl/ascend/env/snapshots").glob("*.yaml")), ids=lambda p: p.name)
def test_committed_snapshots_say_where_they_come_from(path):
    data = yaml.safe_load(path.read_text())
    assert data["generated_by"] == "scripts/ascend_stack_snapshot.py"
    assert data["source"].startswith(("sdist ", "git tag v", "wheel "))
    if path.name.endswith(".pins.yaml"):  # pins only: no surface, so never a stand-in
        assert path.name == f"{data['package']}-{data['version']}.pins.yaml" and "env_vars" not in data
        assert data["requirements"] and data["version"] not in stack.supported_versions(data["package"])
    else:
        assert path.name == f"{data['package']}-{data['version']}.yaml" and data["env_vars"]


# --- the snapshot extractor: fallbacks by parameter name, pins and CANN -----------------------------


def test_extractor_binds_fallbacks_by_the_helpers_parameter_names():
    """v0.25.1rc1's SchedulerConfig helper takes the env name 5th; AscendConfig's takes it 3rd."""
    files = {
        "vllm_ascend/envs.py": "env_variables = {'VLLM_ASCEND_BALANCE_SCHEDULING': None, 'VLLM_ASCEND_X': None}\n",
        "vllm_ascend/ascend_config.py": (
            "class AscendConfig:\n"
            "    def __init__(self, additional_config):\n"
            "        self.x = self._get_config_value(additional_config, 'key_x', 'VLLM_ASCEND_X', False)\n"
            "    @staticmethod\n"
            "    def _get_config_value(additional_config, config_key, env_key, env_value): ...\n"
            "class SchedulerConfig:\n"
            "    def __init__(self, scheduler_config, additional_config, balance_env_value):\n"
            "        self.b = self._get_config_value(\n"
            "            scheduler_config, additional_config, 'enable_balance_scheduling', balance_env_value,\n"
            "            'VLLM_ASCEND_BALANCE_SCHEDULING')\n"
            "        self.s = self._get_config_value(scheduler_config, additional_config, 'short_first', {})\n"
            "        self.k = self._get_config_value(scheduler_config, additional_config, default=1, config_key='kw')\n"
            "    @staticmethod\n"
            "    def _get_config_value(scheduler_config, additional_config, config_key, default, env_key=None): ...\n"
        ),
    }
    data = snapshot(VA, "9.9.9", files, "test")
    assert data["additional_config_keys"] == ["enable_balance_scheduling", "key_x", "kw", "short_first"]
    assert data["env_fallbacks"] == {"VLLM_ASCEND_BALANCE_SCHEDULING": "enable_balance_scheduling", "VLLM_ASCEND_X": "key_x"}


def test_regenerated_snapshots_record_the_balance_fallback_pins_and_cann():
    """Regenerated from the tags (scripts/ascend_stack_snapshot.py --git): the fields each release states."""
    new = yaml.safe_load((REPO / "verl/ascend/env/snapshots/vllm-ascend-0.25.1rc1.yaml").read_text())
    assert new["env_fallbacks"]["VLLM_ASCEND_BALANCE_SCHEDULING"] == "enable_balance_scheduling"
    expected = {"0.23.0": ("transformers==5.5.4", "9.1.0"), "0.24.0rc1": ("transformers==5.13.0", "9.0.1"),
                "0.25.1rc1": ("transformers==5.14.1", "9.0.1")}
    for version, (pin, cann) in expected.items():
        data = yaml.safe_load((REPO / f"verl/ascend/env/snapshots/vllm-ascend-{version}.yaml").read_text())
        assert pin in data["requirements"] and data["cann"] == cann and f"cann:{cann}-" in data["cann_image"]
    assert "transformers==5.14.1" in stack.release_pins(VA, "0.26.0rc1")[0]


def test_release_facts_from_requirements_metadata_and_dockerfile():
    from verl.ascend.env.stack_source import release_facts

    facts = release_facts({
        "requirements.txt": "# c\ncmake>=3.26\nnumpy\ntorch==2.10.0\n-r other.txt\ntransformers==5.14.1\n",
        "Dockerfile": "ARG X=1\nFROM quay.io/ascend/cann:9.0.1-910b-ubuntu22.04-py3.12\n",
    })
    assert facts == {"requirements": ["cmake>=3.26", "torch==2.10.0", "transformers==5.14.1"], "cann": "9.0.1",
                     "cann_image": "quay.io/ascend/cann:9.0.1-910b-ubuntu22.04-py3.12"}
    wheel = release_facts({"x.dist-info/METADATA": "Name: x\nRequires-Dist: torch==2.10.0\n"
                           "Requires-Dist: pytest; extra == 'test'\nRequires-Dist: regex\n"})
    assert wheel == {"requirements": ["torch==2.10.0"]}


# --- declared stacks: pins against verl, stand-ins, user-set deprecated variables -----------------------


def test_pin_conflicts_are_computed_from_both_sides():
    from packaging.requirements import Requirement

    verl = [Requirement("transformers!=5.6.0,<5.11,>=5.5.3"), Requirement("torch")]
    found = stack.pin_conflicts(["transformers==5.14.1", "torch==2.10.0", "numpy>=1"], verl)
    assert [(str(p), str(w)) for p, w in found] == [("transformers==5.14.1", "transformers!=5.6.0,<5.11,>=5.5.3")]
    assert stack.pin_conflicts(["transformers==5.5.4"], verl) == []
    assert stack.pin_conflicts(["transformers==5.6.0"], verl) != []
    assert stack.pin_conflicts(["transformers>=5.12"], [Requirement("transformers==5.9.0")]) != []


def pin_warnings(profile):
    return [w for w in profile.warnings if w.startswith("[stack_pin_conflict]")]


@pytest.mark.parametrize(
    "version,pin,where",
    [("0.24.0rc1", "transformers==5.13.0", "vllm-ascend-0.24.0rc1.yaml"),
     ("0.25.1rc1", "transformers==5.14.1", "vllm-ascend-0.25.1rc1.yaml"),
     ("0.26.0rc1", "transformers==5.14.1", "vllm-ascend-0.26.0rc1.pins.yaml")],
)
def test_a_target_that_cannot_install_next_to_verl_is_warned_naming_the_pin(npu_32b, version, pin, where):
    profile, errors = resolve(npu_32b, version)
    assert errors == []  # a warning: the route findings of the declared release still show
    (warning,) = pin_warnings(profile)
    assert f"vllm-ascend {version} pins {pin} (snapshot {where})" in warning
    # verl's side as its installed metadata states it (verl 0.9.1: transformers>=5.5.3,<5.11,!=5.6.0)
    assert "the installed verl 0.9.1 requires transformers!=5.6.0,<5.11,>=5.5.3" in warning
    assert "pip cannot install both" in warning


def test_the_pinned_target_has_no_pin_conflict_and_the_check_follows_verls_metadata(npu_32b, monkeypatch):
    from packaging.requirements import Requirement

    assert pin_warnings(resolve(npu_32b, "0.23.0")[0]) == []
    monkeypatch.setattr(stack, "requirements_of", lambda name, path=None: [Requirement("transformers>=5.5.3,<6")])
    assert pin_warnings(resolve(npu_32b, "0.25.1rc1")[0]) == []


USER_KEY = "actor_rollout_ref.rollout.engine_kwargs.vllm.additional_config.mc2_comm_alg"


def test_a_key_the_stand_in_lacks_is_unknown_not_unavailable(npu_32b):
    profile, errors = resolve(npu_32b, "99.0.0", **{USER_KEY: "fused"})
    assert errors == []
    (warning,) = [w for w in profile.warnings if w.startswith("[switch_unknown_to_stand_in]")]
    assert USER_KEY in warning and "stand-in snapshot of vllm-ascend 0.25.1rc1" in warning and "99.0.0" in warning
    assert any("99.0.0 has no snapshot of its own" in n and "0.25.1rc1" in n for n in profile.notes)
    assert pin_warnings(profile) == []  # 99.0.0's own pins are unknown: a note, not the stand-in's pins
    assert any("requirement pins of vllm-ascend 99.0.0 are not known" in n for n in profile.notes)


def test_a_release_with_its_own_snapshot_still_refuses_unknown_keys(npu_32b):
    _profile, errors = resolve(npu_32b, "0.25.1rc1", **{USER_KEY: "fused"})
    assert [e.rule for e in errors] == ["switch_unavailable"] and errors[0].keys == (USER_KEY,)


def test_the_rule_reports_the_stand_in_warning_and_passes(npu_32b):
    """The same through the checks pipeline's Ascend rule (what DRY_RUN and the doctor print)."""
    from verl.ascend.env.rules import env_conflicts
    from verl_ascend.checks.findings import ERROR, WARN
    from verl_ascend.checks.view import ConfigView

    cfg = copy.deepcopy(npu_32b)
    with open_dict(cfg):
        OmegaConf.update(cfg, USER_KEY, "fused", force_add=True)
    findings = list(env_conflicts(ConfigView(cfg, declared(VA, "99.0.0"))))
    assert [f.rule for f in findings if f.severity == ERROR] == []
    (unknown,) = [f for f in findings if f.rule == "switch_unknown_to_stand_in"]
    assert unknown.severity == WARN and USER_KEY in unknown.message
    pins = [f for f in env_conflicts(ConfigView(npu_32b, declared(VA, "0.25.1rc1"))) if f.rule == "stack_pin_conflict"]
    assert len(pins) == 1 and "transformers==5.14.1" in pins[0].message


def exported_mc2(config, version, tp):
    environ = {**declared(VA, version), "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE": "1"}
    cfg = copy.deepcopy(config)
    with open_dict(cfg):
        OmegaConf.update(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size", tp, force_add=True)
    profile, errors = evaluate_env_profile(cfg, environ)
    assert errors == []
    return [w for w in profile.warnings if "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE" in w], profile


def test_an_exported_deprecated_variable_is_reported_as_set_by_the_user(npu_32b):
    (warning,), profile = exported_mc2(npu_32b, "0.23.0", 1)
    assert warning.startswith("[env_var_deprecated] mc2: VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE=1 is set by the user")
    assert "deprecated fallback of additional_config.enable_matmul_allreduce" in warning
    assert "mc2 does nothing at rollout TP 1" in warning
    assert "engine_kwargs.vllm.additional_config.enable_matmul_allreduce instead" in warning
    assert not any("not set" in n for n in profile.notes)  # no longer "not applicable ..., not set"
    assert profile.additional_config == {}  # the profile itself still emits nothing at TP 1


def test_the_exported_variable_per_tp_and_release(npu_32b):
    (tp8,), _ = exported_mc2(npu_32b, "0.23.0", 8)
    assert "additional_config.enable_matmul_allreduce is set too and wins, so the variable does nothing" in tp8
    (gone,), _ = exported_mc2(npu_32b, "0.25.1rc1", 1)
    assert gone.startswith("[env_var_not_read] mc2: VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE=1 is set by the user")
    assert "vllm-ascend 0.25.1rc1" in gone and "does not read it" in gone
    (tp4,), _ = exported_mc2(npu_32b, "0.24.0rc1", 4)
    assert "it turns mc2 on at rollout TP 4" in tp4


def test_install_acceptance_check_fails_on_a_machine_without_the_npu_set():
    result = subprocess.run(
        [sys.executable, "-m", "verl_ascend", "stack-gate"], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert result.returncode == 2  # refused (verl_ascend.checks.exits)
    assert "MISMATCH torch-npu: installed none, expected 2.10.0.post4" in result.stdout
    assert "ok       verl: installed 0.9.1" in result.stdout and "stack check: FAILED" in result.stdout
