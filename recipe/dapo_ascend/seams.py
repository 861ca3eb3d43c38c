"""The DAPO recipe's seam rows: the upstream trainer, replay buffer, router and reward members it relies on.

Most rows are ``private-override`` (installed by being used: the recipe's trainer subclasses
upstream's) or ``trainer``-stage rebinds done by the recipe's components. Registered in the
entry-point group ``verl_ascend.seams`` (setup.py); ``verl-ascend seams`` prints them.
"""

from __future__ import annotations

from verl_ascend.seams.index import HasAttr, Seam, SourceContains

_PR = "tests/verl_ascend/seams/test_index.py::test_fingerprint"

SEAMS: tuple[Seam, ...] = (
    Seam(
        id="recipe_trainer_overrides",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.trainer_sync.PPOTrainerSync (and trainer_base.PPOTrainer) private members, "
            "overridden or called by recipe.dapo_ascend.trainer.DAPOAscendHooks (verl==0.9.1)"
        ),
        test=_PR,
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_rollout_profiling": "246475e395fce0ce",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._rollout_server_managers": "84433e94118798a3",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._start_profiling": "d09fb4cca44bc9a9",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._stop_profiling": "f34c89f92b94e203",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._compute_metrics": "9c7140c1189ed2e4",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer._load_checkpoint": "52b412c5395b2cae",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_compute_metrics"),),
    ),
    Seam(
        id="recipe_trainer_async_modes",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.trainer_colocate_async.PPOTrainerColocateAsync and trainer_separate_async."
            "PPOTrainerSeparateAsync: the members behind the recipe's hooks in the async modes (verl==0.9.1)"
        ),
        test=_PR,
        code="recipe/dapo_ascend/trainer.py::DAPOAscendColocateAsync, recipe/dapo_ascend/trainer.py::DAPOAscendSeparateAsync",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync.get_llm_client": "0cf6b9952bac81d0",
            "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync.on_step_end": "ca6a44d04b292763",
            "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync.on_sample_end": "7a4cda823813b07a",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync.__init__": "d643a21d5874c86e",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync.get_llm_client": "daeede45c8761630",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync.on_step_end": "7ab4e59c4e052dfc",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync._rollout_server_managers": "b1f332524829ab33",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBufferAsync.sample": "f17ba512b705024c",
            # overridden by DAPOAscendHooks: the trace check follows it (separate_async's rollout pool)
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer._stop_rollout_profiling": "13b9becfdb3e7d26",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.add_callback"),),
    ),
    Seam(
        id="recipe_journal_overrides",
        kind="private-override",
        target=(
            "PPOTrainerSync/PPOTrainer._fetch_one_gen_batch, _update_actor, _save_checkpoint, overridden by "
            "recipe.dapo_ascend.trainer.DAPOAscendTrainer to call its RunJournal component (verl==0.9.1)"
        ),
        test=_PR + "[recipe_journal_overrides]",
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer, verl_ascend/run/journal.py::RunJournal",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._fetch_one_gen_batch": "37a980de651f5fd6",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._update_actor": "604dd6989c331a03",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._save_checkpoint": "1ceb1e087ce91c92",
            # PPOTrainer.fit's order (on_step_begin, _save_checkpoint, logger.log) and the tracker file name:
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit": "f1c6fc155674e5be",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_begin": "5310153b568e3d43",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_step_end": "089c73a8c5fc5b86",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_sample_begin": "b2e7c97ef2d4ba17",
            "verl.utils.checkpoint.checkpoint_manager:get_checkpoint_tracker_filename": "d726f8fc7f46eefc",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.on_checkpoint_saved"),),
    ),
    Seam(
        id="recipe_tail_trainer_overrides",
        kind="private-override",
        target=(
            "PPOTrainer._build_replay_buffer and _submit_batch_to_rollout, overridden by "
            "recipe.dapo_ascend.trainer.DAPOAscendTrainer to call its RolloutTail component (verl==0.9.1)"
        ),
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/trainer.py::DAPOAscendTrainer, recipe/dapo_ascend/rollout_tail/component.py::RolloutTail",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._build_replay_buffer": "e0a1b665f5d73bc1",
            "verl.trainer.ppo.v1.trainer_sync:PPOTrainerSync._submit_batch_to_rollout": "eb931056887595df",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.replay_buffer_cls"),),
    ),
    Seam(
        id="recipe_tail_sampler",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.replay_buffer.ReplayBuffer: private members overridden or called by "
            "TailMeter/TailCuttingSampler, and the module-private _accumulate_eviction_metrics (verl==0.9.1)"
        ),
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/sampler.py",
        fingerprints={
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._sampleable_terminal_keys": "061df8ff38888c66",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._evict_terminal_groups": "28baf5f436232000",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._clear_groups": "809ffb8a43c28b69",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._materialize_batch": "f0ddb65cd5c3f065",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._sync_metadata_from_transfer_queue": "79d7fa775a3a6dd4",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._terminal_eviction_reasons": "650a8f1af79507ff",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._wait_for_next_poll": "b99392f15144c10d",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer._select_prompt_uids": "c64cc7cfa0f55617",
            "verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.sample": "993d0cbef040a10b",
            "verl.trainer.ppo.v1.replay_buffer:_accumulate_eviction_metrics": "2261ad5e8c69b53c",
        },
        removable_if=(HasAttr("verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.enough"),),
    ),
    Seam(
        id="recipe_tail_sampler_adopt",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "the ReplayBuffer instance upstream built is adopted by TailMeter.adopt: its __dict__ copied into an "
            "instance of our subclass (verl==0.9.1)"
        ),
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/sampler.py::TailMeter.adopt",
        fingerprints={"verl.trainer.ppo.v1.replay_buffer:ReplayBuffer.__init__": "34790114ebe5992e"},
        covers=("__dict__",),
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.replay_buffer_cls"),),
    ),
    Seam(
        id="recipe_balancer",
        kind="private-override",
        target=(
            "verl.workers.rollout.router.GlobalRequestLoadBalancer._servers and ._inflight_requests, used by "
            "recipe.dapo_ascend.rollout_tail.balancer.OutstandingTokensBalancer (verl==0.9.1)"
        ),
        test="tests/recipe/test_rollout_tail.py",
        code="recipe/dapo_ascend/rollout_tail/balancer.py",
        fingerprints={
            "verl.workers.rollout.router:GlobalRequestLoadBalancer#_servers": "6524b1e20950686b",
            "verl.workers.rollout.router:GlobalRequestLoadBalancer#_inflight_requests": "e4415ed0453758bd",
        },
        removable_if=(HasAttr("verl.workers.rollout.router:GlobalRequestLoadBalancer.servers"),),
    ),
    Seam(
        id="recipe_sole_server_client",
        kind="private-override",
        target=(
            "verl.workers.rollout.llm_server.LLMServerClient._acquire_server and _release_server (and "
            "FullyAsyncLLMServerClient's, the async modes' partial-rollout client), overridden by "
            "recipe.dapo_ascend.sole_server.SoleServerClient and SoleFullyAsyncServerClient; "
            "LLMServerManager.server_handles read (verl==0.9.1)"
        ),
        test="tests/recipe/test_sole_server.py",
        code="recipe/dapo_ascend/sole_server.py::SoleServerClient",
        fingerprints={
            "verl.workers.rollout.llm_server:LLMServerClient._acquire_server": "f2e3d5305b2bc601",
            "verl.workers.rollout.llm_server:LLMServerClient._release_server": "293515c2c820f864",
            "verl.workers.rollout.llm_server:LLMServerClient.generate#_acquire_server": "970717c5fa88a770",
            "verl.workers.rollout.llm_server:LLMServerManager._initialize_llm_servers#self.server_handles": "237f299dd29044f3",
            "verl.workers.rollout.llm_server:LLMServerManager.get_client": "135a594f4af2f7d7",
            "verl.workers.rollout.llm_server:FullyAsyncLLMServerClient._acquire_server": "69fdd1f51f9c116f",
            "verl.workers.rollout.llm_server:FullyAsyncLLMServerClient.generate#super().generate": "73165ce3ec0692b7",
            "verl.trainer.ppo.v1.trainer_separate_async:PPOTrainerSeparateAsync.get_llm_client": "daeede45c8761630",
            "verl.trainer.ppo.v1.trainer_colocate_async:PPOTrainerColocateAsync.get_llm_client": "0cf6b9952bac81d0",
        },
        removable_if=(HasAttr("verl.workers.rollout.llm_server:LLMServerClient.sole_server"),),
    ),
    Seam(
        id="recipe_reward_in_agent_loop",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "the reward handles upstream's AgentLoopWorker calls (handle.compute_score.remote(data)), answered by "
            "recipe.dapo_ascend.local_reward.InProcessRewardHandle with upstream's RewardLoopWorker built in that "
            "process; config.reward.num_workers written 0 before RewardLoopManager reads it (verl==0.9.1)"
        ),
        test="tests/recipe/test_local_reward.py",
        code="recipe/dapo_ascend/local_reward.py, recipe/dapo_ascend/trainer.py::DAPOAscendTrainer.get_reward_handles",
        fingerprints={
            "verl.experimental.agent_loop.agent_loop:AgentLoopWorker._compute_score#compute_score.remote": "89e67713b7020c58",
            "verl.experimental.reward_loop.reward_loop:RewardLoopWorker.__init__": "05170a2d31e226e5",
            "verl.experimental.reward_loop.reward_loop:RewardLoopManager._init_reward_loop_workers#num_workers": "6e7b1844cc136a7d",
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer.get_reward_handles": "cf462f747f361f2e",
        },
        covers=("num_workers",),
        removable_if=(SourceContains("verl.experimental.agent_loop.agent_loop", "in_agent_loop"),),
    ),
)
