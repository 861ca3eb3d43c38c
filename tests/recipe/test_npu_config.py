"""The NPU config composes against upstream verl 0.9.1 with the article's tuned values, and the
example script's dry run prints them, passes overrides through, and refuses conflicts."""

from __future__ import annotations

import io
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from verl_ascend.launch import commands
from tests.launch import require_e2e
from recipe.dapo_ascend.main_dapo import RECIPE
from verl_ascend.run.config_utils import ConfigError
from verl_ascend.checks.rules_schema import unknown_keys, upstream_reference
from verl_ascend.checks import exits

CONFIG_DIR = RECIPE.config_dir
compose = RECIPE.compose

REPO = Path(__file__).resolve().parents[2]
NPU_YAML = CONFIG_DIR / "dapo_qwen25_32b_npu.yaml"
SCRIPT = REPO / "examples" / "dapo_qwen25_32b_npu.sh"
# Variables the env profile reads: never let the test machine's shell decide a verdict.
PROFILE_VARS = (
    "TASK_QUEUE_ENABLE",
    "VLLM_ASCEND_TASK_QUEUE_ENABLE",
    "HCCL_OP_EXPANSION_MODE",
    "VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE",
    "VLLM_USE_V1",
    "VLLM_ASCEND_ENABLE_PREFETCH_MLP",
    "VERL_ASCEND_TARGET_VLLM",
    "VERL_ASCEND_TARGET_VLLM_ASCEND",
    "VERL_PLATFORM",
    "ASCEND_LAUNCH_BLOCKING",
    "VERL_ASCEND_DOCTOR_STRICT",
    "VERL_ASCEND_DOCTOR_IGNORE",
)


@pytest.fixture(scope="module")
def npu():
    return compose("dapo_qwen25_32b_npu")


def test_tuned_values(npu):
    arr = npu.actor_rollout_ref
    assert arr.actor.fsdp_config.fsdp_size == 128
    assert arr.actor.fsdp_config.forward_prefetch is True and arr.actor.strategy == "fsdp"
    # the keys the FSDP engine reads (actor.use_torch_compile etc. are never read in verl 0.9.1)
    assert arr.actor.fsdp_config.entropy_from_logits_with_chunking is True
    assert arr.actor.fsdp_config.use_torch_compile is False
    assert arr.rollout.tensor_model_parallel_size == 8 and arr.rollout.name == "vllm"
    assert arr.rollout.enable_chunked_prefill is True and arr.rollout.enforce_eager is True
    assert (npu.trainer.nnodes, npu.trainer.n_gpus_per_node, npu.trainer.device) == (16, 8, "npu")
    # host_cpu restates the backend's default so a plain override reaches it (test_config_keys.py)
    assert dict(npu.ascend.env) == {"mc2": "auto", "aiv": "auto", "host_cpu": "auto"}
    assert dict(npu.ascend.stack) == {"vllm": "auto", "vllm_ascend": "auto"}
    assert npu.ascend.fused_ops.enable is True


def test_dapo_algorithm_comes_from_the_base(npu):
    from verl.trainer.ppo.utils import need_reference_policy

    actor = npu.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
    assert actor.use_kl_loss is False and npu.algorithm.use_kl_in_reward is False
    assert need_reference_policy(npu) is False
    assert npu.algorithm.filter_groups.enable is True
    assert npu.reward.reward_manager.name == "dapo"
    shaping = npu.reward.reward_kwargs
    assert shaping.overlong_buffer_cfg.enable is True and shaping.max_resp_len == npu.data.max_response_length == 20480


def _leaves(node, prefix=""):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix


def test_no_setting_written_twice():
    base = yaml.safe_load((CONFIG_DIR / "dapo_base.yaml").read_text())
    npu = yaml.safe_load(NPU_YAML.read_text())
    skip = {"hydra", "defaults"}
    both = {k for k in _leaves(npu) if k.split(".")[0] not in skip} & set(_leaves(base))
    # The experiment's name is a label each config gives itself, not a setting; the mean response length is
    # what the job's data does (the memory plan's concurrency at the mean), stated by each job.
    assert both - {"trainer.experiment_name", "memory.mean_response_length"} == set()


def test_upstream_validation_accepts_it(npu):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    validate_config(npu, use_reference_policy=need_reference_policy(npu), use_critic=need_critic(npu))
    assert type(omega_conf_to_dataclass(npu.actor_rollout_ref.actor)).__name__ == "FSDPActorConfig"
    assert omega_conf_to_dataclass(npu.actor_rollout_ref.rollout).tensor_model_parallel_size == 8
    assert omega_conf_to_dataclass(npu.algorithm).filter_groups.enable is True


def test_every_key_exists_in_upstream_schema(npu):
    assert unknown_keys(npu, upstream_reference("fsdp")) == []
    # The check itself bites: a misspelled key is reported.
    typo = OmegaConf.create(OmegaConf.to_container(npu))
    typo.actor_rollout_ref.actor.fsdp_config.fsdp_sise = 1
    found = [key for key, _ in unknown_keys(typo, upstream_reference("fsdp"))]
    assert found == ["actor_rollout_ref.actor.fsdp_config.fsdp_sise"]


def test_reference_schema_matches_a_fresh_upstream_composition():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module("verl.trainer.config", version_base=None):
        fresh = OmegaConf.to_container(hydra_compose("ppo_trainer"), resolve=False)
    fresh_keys, reference_keys = set(_leaves(fresh)), set(_leaves(upstream_reference("fsdp")))
    assert reference_keys - fresh_keys == set()
    # Only top-level scalars may differ (model_engine): the rule checks inside upstream's sections.
    assert all("." not in key for key in fresh_keys - reference_keys)


def test_misspelled_override_is_refused_by_name():
    with pytest.raises(ConfigError, match="data.max_respons_length"):
        compose("dapo_qwen25_32b_npu", ["data.max_respons_length=10"])
    with pytest.raises(ConfigError, match="no config 'nope'"):
        compose("nope")


def _comment_coverage(text: str) -> list[str]:
    """Leaf keys of a YAML file whose value has no reason nearby (inline, above, or on its group)."""
    uncommented, prev_kind, prev_indent, prev_ok = [], None, -1, False
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        indent = len(line) - len(line.lstrip())
        if stripped.startswith("#"):
            prev_kind, prev_indent, prev_ok = "comment", indent, True
            continue
        match = re.match(r"([A-Za-z_][\w]*):(.*)$", stripped)
        if not match:
            prev_kind = "other"
            continue
        value = match.group(2).split("#", 1)[0].strip()
        continues_group = prev_kind == "key" and prev_ok and prev_indent <= indent
        ok = "#" in match.group(2) or prev_kind == "comment" or continues_group
        if value and not ok:
            uncommented.append(stripped)
        prev_kind, prev_indent, prev_ok = "key", indent, ok
    return uncommented


def test_every_default_carries_a_reason():
    body = NPU_YAML.read_text().split("defaults:", 1)[1]
    assert _comment_coverage(body) == []
    assert _comment_coverage("a:\n  b: 1\n") == ["b: 1"]  # the check itself bites


@pytest.mark.parametrize(
    "key",
    ["fsdp_size", "forward_prefetch", "entropy_from_logits_with_chunking", "tensor_model_parallel_size",
     "enable_chunked_prefill", "enforce_eager", "enable", "mc2", "aiv"],
)
def test_article_switches_cite_the_measured_gain(key):
    lines = NPU_YAML.read_text().splitlines()
    index = next(i for i, line in enumerate(lines) if line.strip().startswith(f"{key}:") and i > 10)
    block = []
    for line in reversed(lines[:index]):
        if not line.strip().startswith("#"):
            break
        block.append(line)
    assert "article" in " ".join(block).lower(), f"{key}: {block}"


# --- the dry run -------------------------------------------------------------------------------


def _dry(cfg, environ=None):
    out = io.StringIO()
    code = commands.dry_run(cfg, environ=environ or {}, out=out)
    return code, out.getvalue()


def test_dry_run_prints_config_env_and_verdict(npu):
    code, text = _dry(npu)
    assert code == 0
    config_part = text.split("# ===== effective settings", 1)[0]
    env_part = text.split("# ===== env profile", 1)[1].split("# ===== config doctor", 1)[0]
    loaded = yaml.safe_load(config_part)
    assert loaded["actor_rollout_ref"]["actor"]["fsdp_config"]["fsdp_size"] == 128
    assert loaded["actor_rollout_ref"]["rollout"]["tensor_model_parallel_size"] == 8
    assert loaded["actor_rollout_ref"]["actor"]["clip_ratio_high"] == 0.28
    env_lines = [line.split("  #")[0] for line in env_part.splitlines() if re.match(r"^[A-Z_][A-Z0-9_]*=", line)]
    assert "TASK_QUEUE_ENABLE=2" in env_lines
    assert not [line for line in env_lines if line.startswith(("VLLM_USE_V1=", "VLLM_ASCEND_ENABLE_PREFETCH_MLP="))]
    assert not [line for line in env_lines if line.startswith("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE=")]
    assert "doctor verdict: OK" in text


def _effective(text):
    part = text.split("# ===== effective settings", 1)[1].split("# ===== env profile", 1)[0]
    return dict(line.split(": ", 1) for line in part.splitlines() if ": " in line and not line.startswith("#"))


def test_dry_run_prints_values_where_upstream_consumes_them(npu):
    code, text = _dry(npu)
    values = _effective(text)
    assert code == 0
    assert values["actor_rollout_ref.actor.fsdp_config.use_torch_compile"] == "false"
    assert values["actor_rollout_ref.actor.fsdp_config.entropy_from_logits_with_chunking"] == "true"
    assert values["actor_rollout_ref.rollout -> vllm.additional_config.enable_matmul_allreduce"] == "true"
    assert values["actor_rollout_ref.rollout -> vllm.tensor_parallel_size"] == "8"
    assert values["vllm-ascend"].startswith("vllm-ascend 0.23.0")


@pytest.mark.parametrize(
    "override,rule,named",
    [
        ("actor_rollout_ref.actor.grad_clip=0.5", "switch_not_reaching_consumer", "actor_rollout_ref.actor.optim.clip_grad"),
        ("actor_rollout_ref.rollout.mode=sync", "upstream_config_rejected", "Rollout mode 'sync' has been removed"),
        ("actor_rollout_ref.actor.fsdp_config.use_torch_compile=true", "npu_torch_compile",
         "actor_rollout_ref.actor.fsdp_config.use_torch_compile=true"),
    ],
)
def test_dry_run_refuses_switches_that_do_not_reach_their_consumer(override, rule, named):
    code, text = _dry(compose("dapo_qwen25_32b_npu", [override]))
    (line,) = [line for line in text.splitlines() if line.startswith(f"[error] {rule}:")]
    assert code == exits.REFUSED and named in line


def test_dry_run_at_tp_1_composes_and_says_mc2_does_not_apply():
    # memory.check off: 32B weights at TP 1 (61 GiB) do not fit one card (memory_exceeds_device, exit 2)
    code, text = _dry(compose("dapo_qwen25_32b_npu", ["actor_rollout_ref.rollout.tensor_model_parallel_size=1",
                                                      "memory.check=false"]))
    assert code == 0 and "mc2 (additional_config.enable_matmul_allreduce): not applicable at rollout TP 1" in text
    assert "enable_matmul_allreduce: true" not in text


def test_dry_run_shows_overrides_and_refuses_conflicts():
    shorter = ["data.max_response_length=1234", "reward.reward_kwargs.overlong_buffer_cfg.len=256"]
    code, text = _dry(compose("dapo_qwen25_32b_npu", shorter))
    loaded = yaml.safe_load(text.split("# ===== effective settings", 1)[0])
    assert code == 0 and loaded["data"]["max_response_length"] == 1234
    assert loaded["reward"]["reward_kwargs"]["max_resp_len"] == 1234
    graph = compose("dapo_qwen25_32b_npu", ["actor_rollout_ref.rollout.enforce_eager=False"])
    code, text = _dry(graph, {"TASK_QUEUE_ENABLE": "2"})  # article-only rule: a warning that says so
    assert code == 0 and "[warn] task_queue_2_with_graph_mode" in text and "unverified" in text
    code, text = _dry(graph, {"TASK_QUEUE_ENABLE": "2", "VERL_ASCEND_DOCTOR_STRICT": "1"})
    assert code == exits.REFUSED and "doctor verdict: REFUSED" in text


# --- the example script, end to end ------------------------------------------------------------


def _script(tmp_path, *args, env=None):
    require_e2e("examples/dapo_qwen25_32b_npu.sh")
    environ = {k: v for k, v in os.environ.items() if k not in PROFILE_VARS}
    environ.update({"DRY_RUN": "1", "PYTHON": os.environ.get("PYTHON_FOR_TESTS", "python"), "HOME": str(tmp_path)})
    environ.setdefault("VERL_ASCEND_MEMORY_CACHE", os.path.expanduser("~/.cache/verl-ascend/memory"))  # HOME is tmp_path
    environ.update(env or {})
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=300
    )


@pytest.mark.e2e
def test_script_dry_run_passes_overrides_through(tmp_path):
    run = _script(tmp_path, "data.max_response_length=16384", env={"NNODES": "16", "MODEL_PATH": "/models/q32"})
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = yaml.safe_load(run.stdout.split("# ===== effective settings", 1)[0])
    assert loaded["data"]["max_response_length"] == 16384
    assert loaded["actor_rollout_ref"]["model"]["path"] == "/models/q32"
    assert loaded["actor_rollout_ref"]["actor"]["fsdp_config"]["fsdp_size"] == 128
    assert loaded["actor_rollout_ref"]["actor"]["clip_ratio_high"] == 0.28
    assert re.search(r"^actor_rollout_ref.actor.fsdp_config.use_torch_compile: false$", run.stdout, re.M)
    assert re.search(r"vllm.additional_config.enable_matmul_allreduce: true$", run.stdout, re.M)
    assert not re.search(r"^(VLLM_USE_V1|VLLM_ASCEND_ENABLE_PREFETCH_MLP)=", run.stdout, re.M)
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


@pytest.mark.e2e
def test_script_dry_run_with_a_declared_newer_vllm_ascend_picks_aiv(tmp_path):
    """The target stack declared without installing it: mc2 is gone in 0.25.1rc1, AIV takes over."""
    run = _script(tmp_path, env={"VERL_ASCEND_TARGET_VLLM_ASCEND": "0.25.1rc1"})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "mc2 (additional_config.enable_matmul_allreduce) is not available on target vllm-ascend 0.25.1rc1" in run.stdout
    assert re.search(r"^HCCL_OP_EXPANSION_MODE=AIV ", run.stdout, re.M)
    assert "enable_matmul_allreduce: true" not in run.stdout


@pytest.mark.e2e
def test_script_rejects_bad_environment_before_python(tmp_path):
    run = _script(tmp_path, env={"NNODES": "sixteen", "PYTHON": "/nonexistent/python"})
    assert run.returncode == 2 and "NNODES='sixteen' must be a positive integer" in run.stderr


def test_preflight_builds_upstream_config_objects_before_ray():
    """The launch path (not only the dry run) fails in the driver with upstream's own message."""
    from verl_ascend.checks.preflight import PreflightError, check_upstream_objects

    check_upstream_objects(compose("dapo_qwen25_32b_npu"))
    with pytest.raises(PreflightError, match="Rollout mode 'sync' has been removed"):
        check_upstream_objects(compose("dapo_qwen25_32b_npu", ["actor_rollout_ref.rollout.mode=sync"]))
