"""The "optimisations active" checklist: was each of the article's optimisations asked for, and did
it actually run?

Kernel items are decided from the traces (fused kernel present in device kernels), switch items from
the env profile / run config the run recorded. Each item says what to do when it is off, and which
article measurement it moves.

Statuses: ``active``, ``MISSING`` (asked for or expected but not seen), ``off`` (not asked for),
``CONFLICT`` (two switches that the article says exclude each other), ``n/a`` (nothing to judge by:
no NPU kernels, or no env profile).
"""

from __future__ import annotations

from verl_ascend.report.lanes import LaneStats
from verl_ascend.report.run_settings import RunSettings
from verl_ascend.report.settings import Settings

ROLLOUT = "actor_rollout_ref.rollout"
ACTOR = "actor_rollout_ref.actor"


def _truthy(value) -> bool:
    """A config switch as the distribution's one parser reads it (an unreadable value counts as off)."""
    from verl_ascend.envs import parse_bool

    try:
        return parse_bool("value", value)
    except ValueError:
        return False


def _item(key: str, label: str, status: str, detail: str, fix: str = "") -> dict:
    return {"id": key, "label": label, "status": status, "detail": detail, "fix": fix}


def fused_kernel_items(lanes: list[LaneStats], run: RunSettings, settings: Settings) -> list[dict]:
    npu_lanes = [l for l in lanes if l.platform == "npu"]
    items = []
    for key, spec in settings.fused_kernels.items():
        label = spec.get("label", key)
        fix = " ".join(str(spec.get("fix", "")).split())
        by_kind = {}
        for l in npu_lanes:  # a CUDA rms_norm kernel is not the Ascend fused kernel
            hits = l.fused_hits.get(key, 0)
            if hits:
                by_kind[l.kind] = by_kind.get(l.kind, 0) + hits
        seen = ", ".join(f"{k}: {v} calls" for k, v in sorted(by_kind.items()))
        requested = None  # None: not a requested-only item
        asked_by = spec.get("requested_by_env") or spec.get("requested_by_config")
        if asked_by:
            asks = []
            for var, values in (spec.get("requested_by_env") or {}).items():
                value = run.env(var, role="rollout")
                if value is not None:
                    asks.append((var, value, str(value) in [str(v) for v in values]))
            for key_, values in (spec.get("requested_by_config") or {}).items():
                value = run.config(key_)
                if value is not None:
                    asks.append((key_, value, str(value) in [str(v) for v in values]))
            known = run.has_env or run.has_config
            requested = any(a[2] for a in asks) if asks else (None if not known else False)
            ask_text = ", ".join(f"{v}={val}" for v, val, _ in asks) or "not set"
        if not npu_lanes and not by_kind:
            items.append(_item(key, label, "n/a", "no NPU kernels in these inputs (CPU or GPU traces)"))
            continue
        if asked_by:
            if requested is None:
                status = "active" if by_kind else "n/a"
                detail = (f"seen ({seen})" if by_kind else "not seen") + "; no env profile: cannot tell whether it was asked for"
            elif requested:
                status = "active" if by_kind else "MISSING"
                detail = f"asked for ({ask_text}); " + (f"seen ({seen})" if by_kind else "no such kernel in any trace")
            else:
                status = "active" if by_kind else "off"
                detail = f"not asked for ({ask_text})" + (f"; seen anyway ({seen})" if by_kind else "")
        else:
            status = "active" if by_kind else "MISSING"
            detail = f"seen ({seen})" if by_kind else "no such kernel in the NPU traces"
        items.append(_item(key, label, status, detail, fix if status in ("MISSING", "off") else ""))
    return items


def _enforce_eager(run: RunSettings) -> tuple[str, object]:
    """(the key that decided, its value): the ``enforce_eager`` vLLM is handed, as the checks read it
    (``engine_kwargs.vllm.enforce_eager`` wins over ``rollout.enforce_eager`` for a vLLM rollout)."""
    from verl_ascend.checks.effective import rollout_enforce_eager

    read = []

    def config(key):
        read.append(key)
        return run.config(key)

    value = rollout_enforce_eager(config)
    return read[-1], value  # the last key it read gave the value it returned


def switch_items(run: RunSettings) -> list[dict]:
    """Runtime switches of the article (section 2.2-2.4), judged from the recorded env and config."""
    items = []
    if not run.has_env and not run.has_config:
        return [_item("switches", "runtime switches (task queue, AIV, V1, chunked prefill, graph mode)", "n/a",
                      "no env profile or run config among the inputs: pass the run's env_profile.json and "
                      ".hydra/config.yaml (or their directories) to judge them")]
    tq = run.env("TASK_QUEUE_ENABLE", role="train") or run.env("TASK_QUEUE_ENABLE")
    tq_rollout = run.env("TASK_QUEUE_ENABLE", role="rollout") or run.env("VLLM_ASCEND_TASK_QUEUE_ENABLE") or tq
    eager_key, eager = _enforce_eager(run)
    graph = None if eager is None else not _truthy(eager)
    if tq is None and tq_rollout is None:
        items.append(_item("task_queue", "task queue level 2 (TASK_QUEUE_ENABLE)", "n/a" if not run.has_env else "off",
                           "TASK_QUEUE_ENABLE not recorded (torch_npu default: level 1)",
                           "TASK_QUEUE_ENABLE=2 moves more launch work to the second pipeline stage and cut host-bound "
                           "free time (article: +10%); use 1 with graph mode"))
    else:
        level = str(tq_rollout or tq).strip()
        if level == "2" and graph:
            items.append(_item("task_queue", "task queue level 2 (TASK_QUEUE_ENABLE)", "CONFLICT",
                               f"TASK_QUEUE_ENABLE=2 with graph mode ({eager_key.removeprefix('actor_rollout_ref.')}={eager})",
                               "level 2 and ACL graph mode exclude each other: keep 2 with enforce_eager=True, or 1 "
                               "with graph mode"))
        elif level == "2":
            items.append(_item("task_queue", "task queue level 2 (TASK_QUEUE_ENABLE)", "active", f"TASK_QUEUE_ENABLE={level}"))
        else:
            items.append(_item("task_queue", "task queue level 2 (TASK_QUEUE_ENABLE)", "off", f"TASK_QUEUE_ENABLE={level}",
                               "high free time in the profile is host-bound launch overhead: TASK_QUEUE_ENABLE=2 "
                               "(eager) addresses it (article: +10%)" if not graph else
                               "level 1 is the right choice with graph mode"))
    if graph is not None:
        items.append(_item("graph_mode", "rollout graph mode (enforce_eager=False)", "active" if graph else "off",
                           f"{eager_key}={eager}",
                           "" if graph else "graph mode is the alternative to task queue level 2 (article: about the "
                                            "same gain); choose one"))
    aiv = run.env("HCCL_OP_EXPANSION_MODE", role="rollout") or run.env("HCCL_OP_EXPANSION_MODE")
    mc2_key = f"{ROLLOUT}.engine_kwargs.vllm.additional_config.enable_matmul_allreduce"
    mc2 = run.config(mc2_key)
    mc2 = run.env("VLLM_ASCEND_ENABLE_MATMUL_ALLREDUCE", role="rollout") if mc2 is None else mc2
    if aiv is not None or run.has_env:
        if str(aiv).upper() == "AIV" and mc2 is not None and _truthy(mc2):
            items.append(_item("hccl_aiv", "HCCL expansion on vector cores (AIV)", "CONFLICT",
                               "HCCL_OP_EXPANSION_MODE=AIV together with mc2 (enable_matmul_allreduce)",
                               "the source article reports hangs with AIV next to mc2 (no primary source: "
                               "unverified); keep one to follow it"))
        elif str(aiv).upper() == "AIV":
            items.append(_item("hccl_aiv", "HCCL expansion on vector cores (AIV)", "active", "HCCL_OP_EXPANSION_MODE=AIV",
                               ""))
        else:
            items.append(_item("hccl_aiv", "HCCL expansion on vector cores (AIV)", "off",
                               f"HCCL_OP_EXPANSION_MODE={aiv or 'not set'}",
                               "cuts un-overlapped communication only at TP=8 with long responses (article: +8%); "
                               "needs HDK >= 25.0.rc1.2; conflicts with mc2"))
    chunked = run.config(f"{ROLLOUT}.enable_chunked_prefill")
    if chunked is not None:
        items.append(_item("chunked_prefill", "chunked prefill", "active" if _truthy(chunked) else "off",
                           f"{ROLLOUT}.enable_chunked_prefill={chunked}",
                           "" if _truthy(chunked) else "turn it on (article: +15% with vLLM V1, the only engine of "
                                                          "vLLM 0.23; no VLLM_USE_V1 needed)"))
    prefetch = run.config(f"{ACTOR}.fsdp_config.forward_prefetch")
    strategy = run.config(f"{ACTOR}.strategy")
    if prefetch is not None:
        if _truthy(prefetch) and str(strategy) == "fsdp2":
            items.append(_item("forward_prefetch", "FSDP forward prefetch", "n/a",
                               "forward_prefetch=True has no effect under fsdp2 (FSDP1 only)", ""))
        else:
            items.append(_item("forward_prefetch", "FSDP forward prefetch", "active" if _truthy(prefetch) else "off",
                               f"{ACTOR}.fsdp_config.forward_prefetch={prefetch}",
                               "" if _truthy(prefetch) else "overlaps the next all-gather with compute (FSDP1)"))
    chunk_entropy = run.config(f"{ACTOR}.entropy_from_logits_with_chunking")
    if chunk_entropy is not None:
        items.append(_item("entropy_chunking", "chunked entropy", "active" if _truthy(chunk_entropy) else "off",
                           f"{ACTOR}.entropy_from_logits_with_chunking={chunk_entropy}",
                           "" if _truthy(chunk_entropy) else "lowers peak memory with long responses"))
    return items


def build_checklist(lanes: list[LaneStats], run: RunSettings, settings: Settings) -> list[dict]:
    return fused_kernel_items(lanes, run, settings) + switch_items(run)
