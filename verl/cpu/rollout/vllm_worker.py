"""The worker extension of upstream's vLLM rollout on vLLM's CPU build.

vLLM's workers inherit from the class named by ``worker_extension_cls``; upstream names
``vLLMColocateWorkerExtension``, whose weight sync loads the trainer's tensors with
``model.load_weights`` into the live parameters and then runs
``process_weights_after_loading`` over the whole model. On the CPU build that cannot work
twice: processing hands every linear weight to a packed oneDNN GEMM and replaces
``layer.weight`` with an empty parameter (no ``weight_loader``), so the second load fails
with ``'Parameter' object has no attribute 'weight_loader'``.

vLLM ships the path for exactly this, reloading into processed layers: its layerwise reload
(``vllm.model_executor.model_loader.reload``) puts each layer back in its load-time shape,
routes every ``weight_loader`` through a buffer, and re-runs the layer's processing once all
of its weights arrived, copying the result into the live kernel tensors. This extension keeps
upstream's transport (the bucketed ZMQ/shared-memory receiver, upstream's ``_update_weights``)
and only brackets the plain (unquantized, non-LoRA) sync with that reload.

``verl_cpu_probe`` tells what ran in this worker process: the general plugin (in which pids of
its lineage) and the rollout environment. Ask for it through vLLM's ``collective_rpc``, or set
``VERL_CPU_VLLM_PROBE_DIR``: after each weight sync every worker writes it there as
``<pid>.json`` (what the end-to-end test reads).

Seam ``cpu_vllm_weight_sync``: named as ``worker_extension_cls`` by ``cpu_vllm_server`` on the CPU platform.
Goes when upstream's ``update_weights_from_ipc`` reloads through vLLM's
``initialize/finalize_layerwise_reload`` (as vLLM's own ``reload_weights`` does).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension

FQN = "verl.cpu.rollout.vllm_worker.CPUvLLMWorkerExtension"
PROBE_DIR_ENV = "VERL_CPU_VLLM_PROBE_DIR"


class CPUvLLMWorkerExtension(vLLMColocateWorkerExtension):
    def update_weights_from_ipc(self, peft_config: dict = None, base_sync_done=False, use_shm: bool = False):
        """Upstream's weight sync, loaded through vLLM's layerwise reload."""
        if peft_config or getattr(self, "_is_qat_model", False) or getattr(self, "_is_modelopt_qat", False):
            raise NotImplementedError(
                "rollout.name=vllm on the CPU platform syncs plain (unquantized, non-LoRA) weights only; "
                "drop actor_rollout_ref.model.lora_rank / rollout.quantization for CPU runs"
            )
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver

        models = list(self._iter_all_models_with_config())
        for model, _ in models:
            initialize_layerwise_reload(model)
        receiver = BucketedWeightReceiver(self._get_zmq_handle(), torch.device("cpu"), use_shm=use_shm)
        # Clone out of the receiver's reused bucket buffer: the reload holds a layer's tensors
        # until all of them arrived, which may be a later bucket (or after the buffer is freed).
        receiver.receive_weights(
            on_bucket_received=lambda weights, is_last: self._update_weights(
                [(name, tensor.clone()) for name, tensor in weights], peft_config=None, base_sync_done=base_sync_done
            )
        )
        for model, model_config in models:
            finalize_layerwise_reload(model, model_config)
        self.verl_cpu_weight_syncs = getattr(self, "verl_cpu_weight_syncs", 0) + 1
        probe_dir = os.environ.get(PROBE_DIR_ENV)
        if probe_dir:
            from verl.cpu.vllm_plugin import LISTED_ENV

            names = [LISTED_ENV, *os.environ.get(LISTED_ENV, "").split(",")]
            Path(probe_dir, f"{os.getpid()}.json").write_text(json.dumps(self.verl_cpu_probe(names)))

    def verl_cpu_probe(self, names: list[str]) -> dict:
        """What this worker process saw: its pid, whether our vLLM plugin ran here, ``names`` from its env."""
        from verl.cpu import vllm_plugin

        return {
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "plugin_pids": vllm_plugin.ran_in(),
            "env": {name: os.environ.get(name) for name in names},
            "weight_syncs": getattr(self, "verl_cpu_weight_syncs", 0),
        }
