"""The DAPO recipe's seam rows: the upstream trainer, replay buffer, router and reward members it relies on.

Most rows are ``private-override`` (installed by being used: the recipe's trainer subclasses
upstream's) or ``trainer``-stage rebinds done by the recipe's components. Registered in the
entry-point group ``verl_ascend.seams`` (setup.py); ``python -m verl_ascend.seams`` prints them.
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
        why=(
            "The recipe's trainer adds reward/agent-loop/tail metrics to upstream's _compute_metrics, a trace "
            "check around upstream's profiling steps, the profiled step for the CPU backend's hf servers, the "
            "replay buffer's poll interval, and a resume on new data that keeps the dataloader's fresh position "
            "(_load_checkpoint); upstream offers no hook for any of these."
        ),
        switched_on="Always in the recipe's trainer, every trainer.v1.trainer_mode (recipe/dapo_ascend/modes.py).",
        upstream_fix=(
            "None filed yet: public trainer hooks (on_metrics(batch, metrics), on_profile_step_begin/end, a "
            "replay-buffer factory option for poll_interval)."
        ),
        remove_when="upstream's trainer exposes these as public hooks.",
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
        id="recipe_trainer_mode_sync",
        kind="instance-rebind",
        stage="trainer",
        target=(
            "config.trainer.v1.trainer_mode, read by verl.trainer.main_ppo.TaskRunnerV1.run (get_trainer_cls) and "
            "verl.trainer.ppo.v1.trainer_base.PPOTrainer (verl==0.9.1)"
        ),
        why=(
            "Upstream's task runner picks the trainer class by trainer_mode, and its trainer then branches on the "
            "same string (== 'sync': replay buffer class, refill rules, checkpoint contents; trainer.v1.<mode>: "
            "the mode's settings). The entry point swaps in the recipe's registry name for the user's mode "
            "(recipe/dapo_ascend/modes.py::to_registry_name, just before run_ppo) and the recipe's trainer puts "
            "upstream's name back before upstream's __init__ reads it."
        ),
        switched_on="verl_ascend.launch.start -> RECIPE.bind_trainer (modes.to_registry_name); DAPOAscendHooks.__init__, before upstream's __init__.",
        upstream_fix="None filed yet: a class attribute (e.g. PPOTrainer.synchronous) instead of a mode string.",
        remove_when="upstream decides sync/async by the trainer class, not by the mode name.",
        test=_PR,
        code="recipe/dapo_ascend/modes.py::to_registry_name, recipe/dapo_ascend/trainer.py::DAPOAscendHooks.__init__",
        fingerprints={
            "verl.trainer.ppo.v1.trainer_base:PPOTrainer#trainer_mode": "4a99764148d80312",
            "verl.trainer.main_ppo:TaskRunnerV1.run#get_trainer_cls(": "1a68348ba6a97c4c",
        },
        covers=("trainer_mode",),
        removable_if=(HasAttr("verl.trainer.ppo.v1.trainer_base:PPOTrainer.synchronous"),),
    ),
    Seam(
        id="recipe_trainer_async_modes",
        kind="private-override",
        target=(
            "verl.trainer.ppo.v1.trainer_colocate_async.PPOTrainerColocateAsync and trainer_separate_async."
            "PPOTrainerSeparateAsync: the members behind the recipe's hooks in the async modes (verl==0.9.1)"
        ),
        why=(
            "The recipe's hooks sit in front of upstream's class for each mode (DAPOAscendColocateAsync, "
            "DAPOAscendSeparateAsync) and lean on what those classes do: their partial-rollout client "
            "(get_llm_client, kept), their weight sync in on_step_end, separate_async's rollout-pool profiling "
            "stop in on_step_end (the trace check follows it) and its server managers, its __init__ asserts "
            "(checked before Ray by verl_ascend/checks/rules_async.py), and ReplayBufferAsync.sample, which the "
            "watchdog wraps."
        ),
        switched_on="trainer.v1.trainer_mode=colocate_async or separate_async in the recipe.",
        upstream_fix="None filed yet: trainer callbacks instead of subclass hooks.",
        remove_when="upstream's trainers take callbacks (composition) for metrics, profiling and step events.",
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
        why=(
            "The crash-safe run journal records each step's prompts, status and checkpoint markers around "
            "upstream's batch fetch, actor update and checkpoint save."
        ),
        switched_on="Always in the recipe's trainer (its journal component, verl_ascend/run/journal.py::RunJournal).",
        upstream_fix="None filed yet: trainer callbacks (on_batch, on_update, on_checkpoint_saved).",
        remove_when="upstream's trainer exposes step callbacks.",
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
        why="The long-tail policy swaps in its sampler and notes the uids submitted for rollout.",
        switched_on="Always in the recipe's trainer; acts when trainer.v1.dapo_ascend.rollout_tail is on.",
        upstream_fix="None filed yet: a sampler_cls option for the replay buffer and a submit callback.",
        remove_when="upstream lets a trainer choose its sampler class and observe submissions.",
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
        why=(
            "The tail-cutting sampler re-implements upstream's synchronous sample on upstream's own private "
            "steps (sync metadata, eviction, selection, materialisation) to stop waiting for the slowest groups."
        ),
        switched_on="trainer.v1.dapo_ascend.rollout_tail enabled (TailMeter always measures).",
        upstream_fix="None filed yet: a ReplayBuffer 'enough' predicate / early-stop hook in sample().",
        remove_when="upstream's ReplayBuffer can cut the tail itself.",
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
        why=(
            "Upstream builds its buffer inside _build_replay_buffer with arguments of its own; adopting the "
            "instance keeps those arguments without re-deriving them."
        ),
        switched_on="DAPOAscendTrainer._build_replay_buffer -> RolloutTail.adopt.",
        upstream_fix="As for recipe_tail_sampler (a sampler_cls option would build ours directly).",
        remove_when="upstream lets a trainer choose its sampler class.",
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
        why="The outstanding-tokens balancer places requests by decode budget on upstream's server table.",
        switched_on="trainer.v1.dapo_ascend.rollout_tail.balance=outstanding_tokens (router_config_path YAML).",
        upstream_fix="None filed yet: public servers()/inflight() accessors on GlobalRequestLoadBalancer.",
        remove_when="upstream's balancer exposes its server table.",
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
        why=(
            "With one rollout server, upstream's client still asks the load-balancer actor for it and releases it "
            "with two Ray calls per sample; on 2 CPU cores they were a tenth of the agent loop's time."
        ),
        switched_on=(
            "DAPOAscendHooks.get_llm_client: exactly one rollout server, no rollout.router_config_path, "
            "trainer.v1.dapo_ascend.rollout_tail off (sync); in the async modes one server in the mode's pool "
            "and, in separate_async, trainer.v1.separate_async.hybrid_rollout.enable_switch off."
        ),
        upstream_fix="None filed yet: LLMServerClient skipping the balancer when the registry holds one server.",
        remove_when="upstream's client routes a single server without the balancer.",
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
        why=(
            "A rule-based reward costs a Ray call per sample to a reward actor that unpickles the sample: a third "
            "of a core on the 2-core demo machine for a two-digit comparison. In the agent loop it is a function call."
        ),
        switched_on="trainer.v1.dapo_ascend.reward_in_agent_loop=true (dapo_demo_cpu; off in dapo_base).",
        upstream_fix="None filed yet: a reward.mode=in_agent_loop for rule-based rewards.",
        remove_when="upstream can score rule-based rewards in the agent loop itself.",
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
