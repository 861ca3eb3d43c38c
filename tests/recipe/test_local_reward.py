"""trainer.v1.dapo_ascend.reward_in_agent_loop: upstream's reward worker, built in the agent loop.

The handle the trainer gives the agent loops is pickled to them (as Ray pickles actor
arguments) and there answers upstream's one call, ``await handle.compute_score.remote(data)``,
with upstream's own RewardLoopWorker and the tiny task's reward function. The sample below is
built the way upstream's agent loop builds it (agent_loop.py, AgentLoopWorker._compute_score).
"""

from __future__ import annotations

import asyncio
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from recipe.dapo_ascend.local_reward import (
    KEY,
    InProcessRewardHandle,
    check_in_process_reward,
    release_reward_workers,
)
from recipe.dapo_ascend.options import DapoAscendOptions
from recipe.dapo_ascend.tiny.assets import VOCAB

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "recipe" / "dapo_ascend" / "config")


def _demo_config(tiny_dir):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="dapo_demo_cpu", overrides=[f"tiny_dir={tiny_dir}"])


def _sample(response: str, answer: str):
    """One finished sample as upstream's agent loop hands it to a reward worker."""
    from tensordict import TensorDict

    from verl.protocol import DataProto

    prompt = torch.tensor([VOCAB.index(c) for c in "333="], dtype=torch.int64)
    resp = torch.tensor([VOCAB.index(c) for c in response] + [VOCAB.index("<|im_end|>")], dtype=torch.int64)
    ids = torch.cat([prompt, resp])
    batch = TensorDict(
        {
            "prompts": prompt[None],
            "responses": resp[None],
            "input_ids": ids[None],
            "attention_mask": torch.ones_like(ids)[None],
            "position_ids": torch.arange(len(ids))[None],
        },
        batch_size=1,
    )
    non_tensor = {
        "data_source": np.array(["same_digit"], dtype=object),
        "reward_model": np.array([{"ground_truth": answer, "style": "rule"}], dtype=object),
        "extra_info": np.array([{}], dtype=object),
    }
    return DataProto(batch=batch, non_tensor_batch=non_tensor)


def _scores(handle, *cases):
    """Score ``(response, answer)`` pairs on one event loop, as in the agent-loop worker."""

    async def calls():
        return [await handle.compute_score.remote(_sample(response, answer)) for response, answer in cases]

    return asyncio.run(calls())


def test_handle_scores_with_upstreams_reward_worker_after_pickling(tiny_dir):
    config = _demo_config(tiny_dir)
    OmegaConf.resolve(config)
    handle = pickle.loads(pickle.dumps(InProcessRewardHandle(config)))
    right, wrong, run_on = _scores(handle, ("3", "3"), ("4", "3"), ("333333", "3"))
    assert right["reward_score"] == 1.0 and right["reward_extra_info"]["acc"] is True
    assert wrong["reward_score"] == 0.0 and wrong["reward_extra_info"]["acc"] is False
    # DAPO's overlong shaping applies: 7 tokens against 8 - 4 expected -> -(7 - 4) / 4.
    assert run_on["reward_extra_info"]["acc"] is True
    assert run_on["reward_score"] == pytest.approx(1.0 - 0.75)
    assert run_on["reward_extra_info"]["overlong"]
    # Built once where it is used; a pickled copy starts without it (never ships a worker).
    worker = handle.worker()
    assert handle.worker() is worker
    assert pickle.loads(pickle.dumps(handle))._worker is None


def test_switch_refuses_a_reward_model_naming_both_keys():
    config = OmegaConf.create({"reward": {"reward_model": {"enable": True}, "num_workers": 8}})
    with pytest.raises(ValueError) as err:
        check_in_process_reward(config)
    assert KEY in str(err.value) and "reward.reward_model.enable" in str(err.value)
    check_in_process_reward(OmegaConf.create({"reward": {"reward_model": {"enable": False}}}))


def test_switch_releases_the_reward_actors():
    config = OmegaConf.create({"reward": {"num_workers": 8}})
    OmegaConf.set_struct(config, True)
    assert release_reward_workers(config) == 8
    assert config.reward.num_workers == 0


@pytest.mark.parametrize("raw, expected", [(True, True), ("false", False), (None, False)])
def test_option_is_parsed_as_a_boolean(raw, expected):
    config = OmegaConf.create({"trainer": {"v1": {"dapo_ascend": {"reward_in_agent_loop": raw}}}})
    assert DapoAscendOptions.from_config(config).reward_in_agent_loop is expected


def test_option_rejects_a_non_boolean_naming_the_key():
    config = OmegaConf.create({"trainer": {"v1": {"dapo_ascend": {"reward_in_agent_loop": "sometimes"}}}})
    with pytest.raises(ValueError, match="trainer.v1.dapo_ascend.reward_in_agent_loop='sometimes'"):
        DapoAscendOptions.from_config(config)
