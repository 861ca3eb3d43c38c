"""``HFRolloutServer``: a Ray actor serving upstream's token-in/token-out rollout-server API.

The agent loop sends one request per sample, concurrently. The server queues them and a
single batching loop starts an engine batch (after waiting ``batch_wait_ms`` for more to
arrive) in the server's one torch thread, so the actor keeps accepting requests, aborts and
control calls meanwhile; requests that arrive while it decodes join it at the next step (up to
``max_num_seqs`` rows), and each response is returned the moment it is finished.
All torch work (batches, weight loads, the profiler) runs on that same thread: the
profiler (Kineto) must start and stop on the thread that runs the model.

Control calls mirror upstream's vLLM server (``wake_up``, ``sleep``, ``clear_kv_cache``,
``set_global_steps``, ``abort_all_requests``, ``resume_generation``, ``abort_request``,
``start_profile``/``stop_profile``), so upstream's replica/manager code drives it unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import torch

from verl.cpu.rollout.engine import GenerationRequest, HFGenerationEngine, SamplingSpec
from verl_ascend import envs

logger = logging.getLogger(__name__)

BATCH_WAIT_MS = envs.number("VERL_HF_ROLLOUT_BATCH_WAIT_MS")
# Intra-op threads of the server's torch. Small matrices gain nothing from more, and with
# several processes per core (trainer, servers, Ray) spinning threads cost 100x (measured).
THREADS = envs.number("VERL_HF_ROLLOUT_THREADS")


def load_causal_lm(model_path: str, dtype: str = "float32"):
    """Load a local transformers causal LM for CPU inference (no hub access)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if not os.path.isdir(model_path):
        raise FileNotFoundError(f"hf rollout: model path {model_path!r} is not a local directory")
    config = AutoConfig.from_pretrained(model_path, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(
        model_path,
        config=config,
        dtype=getattr(torch, dtype),
        attn_implementation="sdpa",
        local_files_only=True,
    )
    return model


class HFRolloutServer:
    """One rollout replica's server. Created by ``HFReplica`` as a named Ray actor."""

    def __init__(self, config, model_config, replica_rank: int):
        from verl.utils import hf_tokenizer

        self.config = config
        self.model_config = model_config
        self.replica_rank = replica_rank
        self.global_steps: Optional[int] = None
        model_path = model_config.local_path if getattr(model_config, "local_path", None) else model_config.path
        self._torch_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-rollout")
        torch.set_num_threads(THREADS)
        torch.manual_seed(int(getattr(config, "seed", 0)) + replica_rank)
        tokenizer = hf_tokenizer(model_path, trust_remote_code=False)
        eos = tokenizer.eos_token_id
        eos_ids = list(eos) if isinstance(eos, (list, tuple)) else [eos]
        gen_cfg = getattr(model_config, "generation_config", None)
        if gen_cfg is not None and getattr(gen_cfg, "eos_token_id", None) is not None:
            extra = gen_cfg.eos_token_id
            eos_ids += list(extra) if isinstance(extra, (list, tuple)) else [extra]
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        self.engine = HFGenerationEngine(load_causal_lm(model_path), eos_token_ids=eos_ids, pad_token_id=pad)
        self.max_batch = max(1, int(getattr(config, "max_num_seqs", 64) or 64))
        self.max_model_len = int(
            getattr(config, "max_model_len", None) or (config.prompt_length + config.response_length)
        )
        # Filled on the event loop, drained on the torch thread (deque appends/pops are atomic).
        self._pending: collections.deque[tuple[GenerationRequest, asyncio.Future]] = collections.deque()
        self._inflight: dict[str, GenerationRequest] = {}
        self._wakeup: Optional[asyncio.Event] = None
        self._loop_task: Optional[asyncio.Task] = None
        self._gate_open = True
        self._reject = False
        self._gate: Optional[asyncio.Event] = None
        self._init_profiler()
        self._log_runtime_env()
        self.stats = {"batches": 0, "requests": 0, "generated_tokens": 0, "busy_s": 0.0}
        # prompt digest -> samples of that prompt drawn so far (``_request_seed``)
        self._draws: collections.Counter[bytes] = collections.Counter()

    # ------------------------------------------------------------------ generation
    def _ensure_loop(self) -> None:
        if self._loop_task is None:
            self._wakeup = asyncio.Event()
            self._gate = asyncio.Event()
            self._gate.set()
            self._loop_task = asyncio.get_running_loop().create_task(self._batch_loop())

    def _request_seed(self, prompt_ids: list[int]) -> int:
        """A request's own sampling seed: ``rollout.seed``, the replica, the prompt and how many samples of it came before.

        Why: the agent loop sends each of a prompt's ``n`` samples as its own request, concurrently, and
        which requests share an engine batch depends on timing. Drawn from one shared generator, a sample
        would depend on its batch-mates; drawn from its own generator seeded this way, the k-th sample of a
        prompt is the same in every run with the same seed and data order (the ``n`` samples of a group are
        exchangeable, so which caller gets the k-th does not matter), and another seed draws other samples.
        """
        digest = hashlib.blake2b(repr(prompt_ids).encode(), digest_size=16).digest()
        k = self._draws[digest]
        self._draws[digest] = k + 1
        base = f"{int(getattr(self.config, 'seed', 0) or 0)}/{self.replica_rank}/{k}".encode()
        return int.from_bytes(hashlib.blake2b(base + digest, digest_size=8).digest(), "little") >> 1

    def _sampling_spec(self, prompt_ids: list[int], params: dict[str, Any]) -> SamplingSpec:
        params = dict(params)
        prompt_len = len(prompt_ids)
        room = self.max_model_len - prompt_len
        if room < 1:
            raise ValueError(
                f"hf rollout: prompt of {prompt_len} tokens leaves no room within max_model_len={self.max_model_len}"
            )
        if "max_tokens" in params:
            max_new = params.pop("max_tokens")
        elif "max_new_tokens" in params:
            max_new = params.pop("max_new_tokens")
        else:
            max_new = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - prompt_len
            )
        seed = params.get("seed")
        if seed is None and getattr(self.config, "full_determinism", False):
            seed = int(self.config.seed) + self.replica_rank
        if seed is None:
            seed = self._request_seed(prompt_ids)
        return SamplingSpec(
            max_new_tokens=max(1, min(int(max_new), room)),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", -1)),
            ignore_eos=bool(params.get("ignore_eos", getattr(self.config, "ignore_eos", False))),
            seed=seed,
        )

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        **kwargs: Any,
    ):
        from verl.workers.rollout.replica import TokenOutput

        if image_data is not None or video_data is not None:
            raise NotImplementedError("hf rollout: multimodal inputs are not supported")
        self._ensure_loop()
        if not self._gate.is_set():
            if self._reject:
                return TokenOutput(token_ids=[], log_probs=[], stop_reason="aborted", extra_fields=self._extra())
            await self._gate.wait()
        prompt_ids = [int(t) for t in prompt_ids]
        spec = self._sampling_spec(prompt_ids, sampling_params)
        request = GenerationRequest(request_id=request_id, prompt_ids=prompt_ids, sampling=spec)
        future = asyncio.get_running_loop().create_future()
        self._pending.append((request, future))
        self._inflight[request_id] = request
        self._wakeup.set()
        try:
            result = await future
        finally:
            self._inflight.pop(request_id, None)
        return TokenOutput(
            token_ids=result.token_ids,
            log_probs=result.log_probs,
            stop_reason=result.stop_reason,
            extra_fields=self._extra(finish_reason=result.finish_reason),
        )

    async def _on_torch_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._torch_thread, fn, *args)

    def _extra(self, **more) -> dict[str, Any]:
        return {"global_steps": self.global_steps, **more}

    async def _batch_loop(self) -> None:
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if BATCH_WAIT_MS > 0:
                await asyncio.sleep(BATCH_WAIT_MS / 1000.0)
            while self._pending:
                loop = asyncio.get_running_loop()
                live: list[tuple[GenerationRequest, asyncio.Future]] = []

                def take(room: int, live=live, loop=loop) -> list[GenerationRequest]:
                    # Torch thread: move up to ``room`` queued requests into the running batch.
                    taken = []
                    while room > len(taken) and self._pending:
                        request, future = self._pending.popleft()
                        if request.abort.is_set():
                            loop.call_soon_threadsafe(_resolve, future, _aborted(request))
                            continue
                        live.append((request, future))
                        taken.append(request)
                    return taken

                def deliver(row: int, result, live=live, loop=loop) -> None:
                    # Torch thread, as each row finishes: resolve its caller now, not when the
                    # batch's longest response is done.
                    loop.call_soon_threadsafe(_resolve, live[row][1], result)

                def run_batch(take=take, deliver=deliver):
                    first = take(self.max_batch)
                    if not first:
                        return []
                    return self.engine.generate(first, deliver, admit=lambda active: take(self.max_batch - active))

                started = time.perf_counter()
                try:
                    results = await self._on_torch_thread(run_batch)
                except Exception as exc:  # surface to every caller instead of hanging them
                    logger.exception("hf rollout batch failed")
                    for _, future in live:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                if not results:
                    continue
                self.stats["busy_s"] += time.perf_counter() - started
                self.stats["batches"] += 1
                self.stats["requests"] += len(live)
                for (_, future), result in zip(live, results, strict=True):
                    self.stats["generated_tokens"] += len(result.token_ids)
                    _resolve(future, result)

    # ------------------------------------------------------------------ weights and memory
    async def update_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> int:
        return await self._on_torch_thread(self.engine.load_weights, named_tensors)

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps

    async def wake_up(self, tags: Optional[list[str]] = None):
        return None  # weights stay resident on the CPU

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None  # the KV cache lives only for the duration of one batch

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def wait_for_requests_to_drain(self):
        while self._inflight:
            await asyncio.sleep(0.01)

    # ------------------------------------------------------------------ aborts
    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False):
        self._ensure_loop()
        self._gate.clear()
        self._reject = reject_request
        ids = list(self._inflight)
        for request in self._inflight.values():
            request.abort.set()
        return {"aborted_count": len(ids), "request_ids": ids}

    async def resume_generation(self):
        self._ensure_loop()
        self._reject = False
        self._gate.set()

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True):
        request = self._inflight.get(request_id)
        if request is None:
            return {"aborted": False, "request_id": request_id}
        request.abort.set()
        return {"aborted": True, "request_id": request_id}

    # ------------------------------------------------------------------ introspection, profiling
    async def get_stats(self) -> dict[str, Any]:
        return dict(self.stats)

    def get_server_address(self) -> tuple[str, int]:
        return (f"hf-replica-{self.replica_rank}", 0)

    def _log_runtime_env(self) -> None:
        """Say which runtime-env profile variables (verl.ascend) actually reached this process."""
        raw = os.environ.get("VERL_ASCEND_ENV_PROFILE")
        if not raw:
            return
        import json

        try:
            wanted = json.loads(raw).get("rollout", {})
        except ValueError:
            wanted = {}
        seen = ", ".join(f"{k}={os.environ.get(k, '<unset>')}" for k in sorted(wanted))
        logger.warning("hf rollout server %d: env profile in this process: %s", self.replica_rank, seen)

    def _init_profiler(self) -> None:
        """Rollout profiling as upstream's vLLM server does it: ``rollout.profiler`` decides
        whether this replica is traced (enable, ranks/all_ranks mapped to replicas, discrete
        mode); the ``torch`` tool records a ``torch.profiler`` Chrome trace per profiled step
        into upstream's per-replica directory under ``save_path``."""
        from verl.utils.config import omega_conf_to_dataclass
        from verl.utils.profiler.profile import build_rollout_dist_profiler

        self._profiler = None
        self._profile_step = None
        profiler_config = getattr(self.config, "profiler", None)
        tool_config = None
        if profiler_config is not None and getattr(profiler_config, "tool", None) == "torch":
            tool_config = omega_conf_to_dataclass((profiler_config.tool_config or {}).get("torch"))
        elif profiler_config is not None and getattr(profiler_config, "enable", False):
            logger.warning("hf rollout profiles with tool=torch only, got %r", getattr(profiler_config, "tool", None))
            profiler_config = None
        self._profiler_config = profiler_config
        self.profiler_controller = build_rollout_dist_profiler(
            self.replica_rank, 1, config=profiler_config, tool_config=tool_config
        )

    def _should_profile(self) -> bool:
        c = self.profiler_controller
        return self._profiler_config is not None and c.check_enable() and c.check_this_rank() and c.is_discrete_mode()

    async def start_profile(self, **kwargs):
        if self._profiler is not None or not self._should_profile():
            return
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False)
        await self._on_torch_thread(profiler.__enter__)
        self._profiler = profiler
        self._profile_step = kwargs.get("profile_step", self.global_steps)

    async def stop_profile(self):
        if self._profiler is None:
            return
        from verl.utils.profiler.config import rollout_trace_dir

        profiler, self._profiler = self._profiler, None
        await self._on_torch_thread(profiler.__exit__, None, None, None)
        out_dir = rollout_trace_dir(self._profiler_config, self.replica_rank)
        os.makedirs(out_dir, exist_ok=True)
        path = os.path.join(out_dir, f"hf_rollout_step{self._profile_step}_rank{self.replica_rank}.json")
        tmp = path + ".tmp"
        await self._on_torch_thread(profiler.export_chrome_trace, tmp)
        os.replace(tmp, path)


def _resolve(future: asyncio.Future, result) -> None:
    if not future.done():
        future.set_result(result)


def _aborted(request: GenerationRequest):
    from verl.cpu.rollout.engine import GenerationResult

    return GenerationResult(request.request_id, [], [], stop_reason="aborted", finish_reason="abort")
