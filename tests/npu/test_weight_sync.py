"""verl/ascend/weight_sync.py: upstream's HCCL engine (backend nccl on NPU) against the target vllm-ascend.

The names the engine calls are read from the installed upstream's source; what the communicator offers,
from the committed snapshot of each supported vllm-ascend release (``weight_sync``). The configs are the
recipe's real 32B NPU job with its separate_async preset.
"""

from __future__ import annotations

import dataclasses

from recipe.dapo_ascend.main_dapo import RECIPE
from verl.ascend import weight_sync
from verl.ascend.env import stack, stack_source
from verl_ascend import checks
from verl_ascend.checks.exits import REFUSED

compose = RECIPE.compose

NO_ENV: dict[str, str] = {}
PRESET = ["+pools=npu_separate_128"]
REBUILD = "+actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.nccl.rebuild_group=true"


def _hccl(config):
    return [f for f in checks.validate(config, NO_ENV) if f.rule == "hccl_engine_stack"]


def test_the_engine_calls_read_from_upstreams_source():
    calls = weight_sync.engine_calls()
    assert calls["broadcast"] is False and calls["all_reduce"] is False  # every sync
    assert calls["destroyComm"] is True  # only in finalize under rebuild_group


def test_every_supported_release_offers_what_every_sync_calls():
    needed = {name for name, only_on_rebuild in weight_sync.engine_calls().items() if not only_on_rebuild}
    for version in stack.supported_versions("vllm-ascend"):
        sync = stack.read_snapshot(stack.snapshots("vllm-ascend")[version])["weight_sync"]
        assert sync["module"] == "vllm_ascend.distributed.device_communicators.pyhccl", version
        assert needed <= set(sync["methods"]), (version, sync)
        assert sync["init_params"][:2] == ["group", "device"], version  # PyHcclCommunicator(pg, device=device)


def test_rebuild_group_is_refused_where_the_communicator_has_no_destroy():
    (finding,) = [f for f in _hccl(compose("dapo_qwen25_32b_npu", [*PRESET, REBUILD])) if f.severity == "error"]
    assert "PyHcclCommunicator.destroyComm" in finding.message and "vllm-ascend 0.23.0" in finding.message
    assert finding.keys[0] == "actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.nccl.rebuild_group"
    found = _hccl(compose("dapo_qwen25_32b_npu", PRESET))
    assert [f.severity for f in found] == ["info"]  # the default (false) works: a note says it must stay so


def test_a_declared_release_is_read_from_its_own_snapshot():
    (finding,) = [f for f in _hccl(compose("dapo_qwen25_32b_npu", [*PRESET, REBUILD,
                                                                    "ascend.stack.vllm_ascend=0.25.1rc1"]))
                  if f.severity == "error"]
    assert "vllm-ascend 0.25.1rc1 (snapshot vllm-ascend-0.25.1rc1.yaml)" in finding.message


def test_a_release_without_the_communicator_is_refused(monkeypatch):
    files = {"vllm_ascend/envs.py": "env_variables = {}\n"}
    missing = stack_source.weight_sync_surface("vllm-ascend", files)
    assert missing["missing"] is True
    real = stack.surface
    monkeypatch.setattr(stack, "surface", lambda *a, **k: dataclasses.replace(real(*a, **k), weight_sync=missing))
    config = compose("dapo_qwen25_32b_npu", PRESET)
    (finding,) = _hccl(config)
    assert finding.severity == "error" and "ImportError" in finding.message
    assert checks.refusal(checks.validate(config, NO_ENV), strict=False) is not None and REFUSED == 2


def test_the_rule_stays_out_of_other_engines_and_devices():
    assert _hccl(compose("dapo_qwen25_32b_npu")) == []  # sync: naive
    assert _hccl(compose("dapo_tiny_cpu", ["actor_rollout_ref.rollout.checkpoint_engine.backend=nccl"])) == []


def test_the_dry_run_names_each_pools_roles_and_card_mapping():
    lines = weight_sync.pool_lines(compose("dapo_qwen25_32b_npu", PRESET))
    text = "\n".join(lines)
    assert "trainer pool" in text and "role train" in text and "ASCEND_RT_VISIBLE_DEVICES" in text
    assert "rollout pool" in text and "role rollout on top of train" in text
    assert "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES=1" in text
    assert weight_sync.pool_lines(compose("dapo_qwen25_32b_npu")) == []
