"""Rules for upstream's asynchronous trainer modes: what verl 0.9.1 asserts only inside Ray, checked before.

Upstream's ``PPOTrainerSeparateAsync.__init__`` (``verl/trainer/ppo/v1/trainer_separate_async.py``) runs
in the task runner, after Ray, TransferQueue and the resource pools have started, and stops a wrong
``separate_async`` config with a bare ``AssertionError`` from a Ray actor. Each of its checks is a rule
here, refused before Ray (exit 2 in the launch, ``DRY_RUN=1`` and the doctor), naming upstream's check,
the keys and their values:

- ``separate_async_batch``: ``data.train_batch_size == trainer.v1.separate_async.parameter_sync_step *
  actor_rollout_ref.actor.ppo_mini_batch_size`` (upstream's assertion, its formula named);
- ``parameter_sync_step_divides``: every mode's ``PPOTrainer.step`` (``trainer_base.py``) asserts
  ``train_batch_size % parameter_sync_step == 0`` (a mode other than separate_async whose section sets it);
- ``separate_async_rollout_pool``: ``actor_rollout_ref.rollout.nnodes > 0`` and ``n_gpus_per_node > 0``
  (upstream's assertions), and the standalone pool holds at least one rollout replica
  (``LLMServerManager`` makes ``pool // replica`` replicas, a replica TP x DP x PP cards, with prefill/decode
  disaggregation (TP x prefill_replicas + decode TP x decode_replicas) x DP x PP: 0 means nothing ever generates);
- ``separate_async_nodes``: the two pools never share a node: their total said, refused above the cluster a
  launch script declares (``VERL_ASCEND_CLUSTER_NNODES``);
- ``separate_async_engine``: ``actor_rollout_ref.rollout.checkpoint_engine.backend != "naive"``;
- ``separate_async_reward_model``: a reward model in ``separate_async`` needs its own resource pool;
- ``separate_async_hybrid_switch``: ``hybrid_rollout.enable_switch`` with rollout disaggregation
  (upstream's ``ValueError``), and with ``hybrid_engine=false`` (upstream switches it off with a log line);
- ``hybrid_engine_off``: ``actor_rollout_ref.hybrid_engine=false`` is read by ``separate_async`` only;
- ``separate_async_hybrid_off_crash``: in ``separate_async`` that same key stops upstream's own ``_setup``
  inside Ray where upstream's source logs with ``logger.info(..., flush=True)`` (verl 0.9.1: ``TypeError``)
  and that logger emits INFO (``VERL_LOGGING_LEVEL``, upstream's default INFO; WARN is the way out);
  read from the installed source, so the refusal ends when upstream drops the keyword;
- ``checkpoint_engine_unknown``: a backend name upstream's ``CheckpointEngineRegistry`` does not know
  (read from upstream's source: the ``@CheckpointEngineRegistry.register("...")`` decorators) and the engine
  module in effect does not register either (``engine_modules``: the user's ``custom_backend_module``, else
  the one the device's platform names at launch); ``hccl`` gets the hint that upstream's HCCL engine
  registers as ``nccl``;
- ``warmup_batches_range``: ``num_warmup_batches`` a number in ``colocate_async`` / ``separate_async``; below 0 a
  warning (upstream does not refuse it: it skips any value <= 0, as it does 0).

Keys a device's platform fills in before these checks run at launch (the CPU platform supplies the
rollout pool and the weight-sync engine in ``separate_async``: ``verl/cpu/config_defaults.py``, applied
by upstream's ``auto_set_device`` in the launch's ``prepare`` before the pipeline) are declared by that
backend with :func:`register_launch_defaults`; the doctor and ``DRY_RUN=1``, which do not apply them,
then report a note instead of a refusal the launch would not make.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from verl_ascend.checks import engine_modules
from verl_ascend.checks.findings import ERROR, INFO, WARN, Finding
from verl_ascend.checks.pipeline import tag
from verl_ascend.checks.view import ACTOR, ROLLOUT, ConfigView
from verl_ascend.trainer_mode import ASYNC_MODES, SEPARATE, mode_of
from verl_ascend.trainer_mode import KEY as MODE

SEP = f"trainer.v1.{SEPARATE}"
SYNC_STEP = f"{SEP}.parameter_sync_step"
ENGINE = f"{ROLLOUT}.checkpoint_engine"
BACKEND = f"{ENGINE}.backend"
SWITCH = f"{SEP}.hybrid_rollout.enable_switch"
UPSTREAM_SEPARATE = "verl/trainer/ppo/v1/trainer_separate_async.py::PPOTrainerSeparateAsync.__init__"

# device -> {key: who fills it in at launch}; see register_launch_defaults.
_LAUNCH_DEFAULTS: dict[str, dict[str, str]] = {}


def register_launch_defaults(device: str, keys: dict[str, str]) -> None:
    """A backend declares the keys its platform fills in before the checks run at launch (key -> source)."""
    _LAUNCH_DEFAULTS.setdefault(device, {}).update(keys)


def _filled_at_launch(view: ConfigView, key: str) -> str | None:
    device = view.get("trainer.device")
    return _LAUNCH_DEFAULTS.get(str(device), {}).get(key)


# key -> [(value, preset that sets it)]; see register_preset_values.
_PRESET_VALUES: dict[str, list[tuple[object, str]]] = {}
UPSTREAM_SYNC_STEP_DEFAULT = 4  # trainer.v1.separate_async.parameter_sync_step in verl 0.9.1's ppo_trainer.yaml


def register_preset_values(origin: str, values: dict[str, object]) -> None:
    """A recipe declares the values its presets set (key -> value), so that a refusal can say where the value
    in it probably came from: a preset sized for the recipe's own batch, appended to someone else's script."""
    for key, value in values.items():
        known = _PRESET_VALUES.setdefault(key, [])
        if (value, origin) not in known:
            known.append((value, origin))


def preset_origin(view: ConfigView, key: str) -> str | None:
    """The preset whose value ``key`` holds, if one sets that very value (a user may also have typed it)."""
    value = view.get(key)
    return next((origin for v, origin in _PRESET_VALUES.get(key, ()) if v == value), None)


def separate_async_batch(view: ConfigView) -> Iterator[Finding]:
    """``train_batch_size == parameter_sync_step * ppo_mini_batch_size`` (upstream asserts it in the task runner)."""
    if mode_of(view) != SEPARATE:
        return
    train = view.get_int("data.train_batch_size")
    mini = view.get_int(f"{ACTOR}.ppo_mini_batch_size")
    step = view.get_int(SYNC_STEP)
    keys = ("data.train_batch_size", SYNC_STEP, f"{ACTOR}.ppo_mini_batch_size")
    if step is None or step < 1:
        yield Finding("separate_async_batch", ERROR,
                      f"{SYNC_STEP}={view.get(SYNC_STEP)!r}: upstream's separate_async trainer splits each step into "
                      "parameter_sync_step mini-batch updates and syncs weights after them", keys,
                      accepted="an integer >= 1")
        return
    if not train or not mini or train <= 0 or mini <= 0:
        return  # unset or out of range: the typed-key rules name it
    if train == step * mini:
        return
    options = []
    if train % mini == 0:
        options.append(f"{SYNC_STEP}={train // mini}")
    if train % step == 0:
        options.append(f"{ACTOR}.ppo_mini_batch_size={train // step}")
    options.append(f"data.train_batch_size={step * mini}")
    origin = preset_origin(view, SYNC_STEP)
    whence = (f" ({SYNC_STEP}={step} is the value of the preset {origin}, sized for the recipe's own batch; "
              f"upstream's default is {UPSTREAM_SYNC_STEP_DEFAULT})" if origin else "")
    yield Finding(
        "separate_async_batch", ERROR,
        f"upstream's separate_async trainer asserts train_batch_size == parameter_sync_step * ppo_mini_batch_size "
        f"({UPSTREAM_SEPARATE}), inside Ray; here data.train_batch_size={train}, {SYNC_STEP}={step}, "
        f"{ACTOR}.ppo_mini_batch_size={mini}: {step} x {mini} = {step * mini} != {train}{whence}",
        keys, accepted=" or ".join(options),
    )


def parameter_sync_step_divides(view: ConfigView) -> Iterator[Finding]:
    """``train_batch_size % parameter_sync_step == 0`` (``PPOTrainer.step``, every mode that sets it)."""
    mode = mode_of(view)
    if mode == SEPARATE:
        return  # separate_async_batch checks the stricter equality
    key = f"trainer.v1.{mode}.parameter_sync_step"
    step = view.get_int(key)
    train = view.get_int("data.train_batch_size")
    if step is None or not train or train <= 0:
        return
    if step < 1 or train % step:
        divisors = ", ".join(str(d) for d in [d for d in range(1, train + 1) if train % d == 0][:6])
        yield Finding(
            "parameter_sync_step_divides", ERROR,
            f"{key}={step}: upstream's PPOTrainer.step (verl/trainer/ppo/v1/trainer_base.py) asserts "
            f"train_batch_size % parameter_sync_step == 0 on the first step, with data.train_batch_size={train}",
            (key, "data.train_batch_size"),
            accepted=f"a divisor of {train} (e.g. {divisors})",
        )


def separate_async_rollout_pool(view: ConfigView) -> Iterator[Finding]:
    """The standalone rollout pool: sizes > 0 (upstream's assertions) and at least one replica in it."""
    if mode_of(view) != SEPARATE:
        return
    sizes = {}
    for leaf in ("nnodes", "n_gpus_per_node"):
        key = f"{ROLLOUT}.{leaf}"
        value = view.get_int(key)
        sizes[leaf] = value
        if value is not None and value > 0:
            continue
        source = _filled_at_launch(view, key)
        if source is not None:
            yield Finding("separate_async_rollout_pool", INFO,
                          f"{key}={view.get(key)!r}: filled in at launch by {source} (before the checks run there)", (key,))
            sizes[leaf] = None
            continue
        yield Finding(
            "separate_async_rollout_pool", ERROR,
            f"{key}={view.get(key)!r}: upstream's separate_async trainer asserts {leaf} > 0 ({UPSTREAM_SEPARATE}); "
            f"the standalone rollout pool is {ROLLOUT}.nnodes x {ROLLOUT}.n_gpus_per_node cards, besides the "
            f"trainer pool (trainer.nnodes x trainer.n_gpus_per_node)", (key,),
            accepted=f"an integer > 0 (e.g. {key}=" + ("8" if leaf == "n_gpus_per_node" else "1") + ")",
        )
    if not sizes["nnodes"] or not sizes["n_gpus_per_node"]:
        return
    pool = sizes["nnodes"] * sizes["n_gpus_per_node"]
    replica, shape, shape_keys = replica_cards(view)
    keys = (f"{ROLLOUT}.nnodes", f"{ROLLOUT}.n_gpus_per_node", *shape_keys)
    if pool < replica:
        yield Finding(
            "separate_async_rollout_pool", ERROR,
            f"the standalone rollout pool has {pool} card(s) ({ROLLOUT}.nnodes x n_gpus_per_node) but one replica "
            f"takes {shape} = {replica}: upstream's LLMServerManager makes {pool} // {replica} = 0 "
            "standalone replicas and the trainer waits for samples that never come", keys,
            accepted=f"a rollout pool of at least {replica} cards, a multiple of {replica}",
        )
    elif pool % replica:
        yield Finding(
            "separate_async_rollout_pool", WARN,
            f"the standalone rollout pool has {pool} cards, not a multiple of the {replica} cards of one replica "
            f"({shape}): {pool % replica} card(s) stay idle", keys,
            accepted=f"a multiple of {replica} cards",
        )


DISAGG = f"{ROLLOUT}.disaggregation"


def replica_cards(view: ConfigView) -> tuple[int, str, tuple[str, ...]]:
    """Cards of one rollout replica as upstream's ``LLMServerManager`` counts them
    (``verl/workers/rollout/llm_server.py``): TP x DP x PP, and with prefill/decode disaggregation
    (TP x prefill_replicas + decode TP x decode_replicas) x DP x PP, decode TP defaulting to TP.
    Returns (cards, the product written out, the keys in it)."""
    tp = view.get_int(f"{ROLLOUT}.tensor_model_parallel_size", 1) or 1
    dp = view.get_int(f"{ROLLOUT}.data_parallel_size", 1) or 1
    pp = view.get_int(f"{ROLLOUT}.pipeline_model_parallel_size", 1) or 1
    keys = (f"{ROLLOUT}.tensor_model_parallel_size", f"{ROLLOUT}.data_parallel_size")
    if not view.get_bool(f"{DISAGG}.enabled"):
        return tp * dp * pp, f"TP {tp} x DP {dp} x PP {pp}", keys
    prefill = view.get_int(f"{DISAGG}.prefill_replicas", 1) or 1
    decode = view.get_int(f"{DISAGG}.decode_replicas", 1) or 1
    decode_tp = view.get_int(f"{DISAGG}.decode_tensor_model_parallel_size") or tp
    cards = (tp * prefill + decode_tp * decode) * dp * pp
    shape = (f"(prefill TP {tp} x {prefill} + decode TP {decode_tp} x {decode}) x DP {dp} x PP {pp} "
             f"({DISAGG}.enabled=true)")
    return cards, shape, (*keys, f"{DISAGG}.prefill_replicas", f"{DISAGG}.decode_replicas",
                          f"{DISAGG}.decode_tensor_model_parallel_size")


CLUSTER_NNODES = "VERL_ASCEND_CLUSTER_NNODES"


def separate_async_nodes(view: ConfigView) -> Iterator[Finding]:
    """The nodes ``separate_async`` takes: its trainer pool and its standalone rollout pool never share one.

    Said as a total, with the preset named where a pool's size is the preset's; refused when a launch script
    declares its cluster (``VERL_ASCEND_CLUSTER_NNODES``) and the two pools need more nodes than it has."""
    if mode_of(view) != SEPARATE:
        return
    trainer, rollout = view.get_int("trainer.nnodes"), view.get_int(f"{ROLLOUT}.nnodes")
    if not trainer or not rollout or trainer <= 0 or rollout <= 0:
        return  # unset or out of range: separate_async_rollout_pool and the typed-key rules name it
    origin = preset_origin(view, f"{ROLLOUT}.nnodes")
    total = trainer + rollout
    split = (f"trainer.nnodes={trainer} + {ROLLOUT}.nnodes={rollout}"
             f"{f' (the preset {origin})' if origin else ''} = {total} nodes")
    keys = ("trainer.nnodes", f"{ROLLOUT}.nnodes")
    cluster = _cluster_nodes(view)
    if cluster is not None and total > cluster:
        room = cluster - rollout
        yield Finding(
            "separate_async_nodes", ERROR,
            f"separate_async places its trainer pool and its rollout pool on different nodes: {split}, but "
            f"{CLUSTER_NNODES}={cluster} (the launch's NNODES): Ray cannot place {total - cluster} node(s) of it "
            "and the job waits for resources that never come", keys,
            accepted=(f"trainer.nnodes <= {room} with this rollout pool" if room > 0 else
                      f"a rollout pool of fewer than {cluster} nodes") + " (the launch script's NNODES and ROLLOUT_NNODES "
                     "split the cluster when trainer.nnodes is not given)",
        )
    elif cluster is not None and total < cluster:
        yield Finding("separate_async_nodes", WARN,
                      f"separate_async takes {split} of the {cluster} nodes of the launch ({CLUSTER_NNODES}): "
                      f"{cluster - total} node(s) stay idle", keys, accepted=f"trainer.nnodes={cluster - rollout}")
    else:
        yield Finding("separate_async_nodes", INFO, f"separate_async takes {split} (trainer and rollout pools "
                      "never share a node)", keys)


def _cluster_nodes(view: ConfigView) -> int | None:
    raw = view.environ.get(CLUSTER_NNODES, "")
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def separate_async_engine(view: ConfigView) -> Iterator[Finding]:
    """The weight-sync engine of ``separate_async`` moves weights between processes: not ``naive``."""
    if mode_of(view) != SEPARATE:
        return
    backend = view.get(BACKEND, "naive")
    if backend not in (None, "naive"):
        return
    source = _filled_at_launch(view, BACKEND)
    if source is not None:
        yield Finding("separate_async_engine", INFO, f"{BACKEND}={backend!r}: filled in at launch by {source}", (BACKEND,))
        return
    yield Finding(
        "separate_async_engine", ERROR,
        f"{BACKEND}={backend!r}: upstream's separate_async trainer asserts backend != 'naive' ({UPSTREAM_SEPARATE}); "
        "naive updates a rollout that shares the trainer's process, and the standalone rollout pool does not",
        (BACKEND,), accepted="nccl (NCCL on CUDA, HCCL on Ascend NPU: upstream's HCCLCheckpointEngine registers as nccl), "
                             "nixl, mooncake, or a custom engine with custom_backend_module",
    )


def separate_async_reward_model(view: ConfigView) -> Iterator[Finding]:
    """A reward model in ``separate_async`` needs its own pool (the standalone rollout never pauses)."""
    if mode_of(view) != SEPARATE or not view.get_bool("reward.reward_model.enable"):
        return
    if view.get_bool("reward.reward_model.enable_resource_pool"):
        return
    yield Finding(
        "separate_async_reward_model", ERROR,
        "reward.reward_model.enable=true with reward.reward_model.enable_resource_pool=false: upstream's separate_async "
        f"trainer asserts a standalone reward model ({UPSTREAM_SEPARATE}): the standalone rollout never pauses to "
        "free device memory for a colocated one",
        ("reward.reward_model.enable", "reward.reward_model.enable_resource_pool"),
        accepted="reward.reward_model.enable_resource_pool=true (with its nnodes and n_gpus_per_node > 0)",
    )


def separate_async_hybrid_switch(view: ConfigView) -> Iterator[Finding]:
    """``hybrid_rollout.enable_switch``: not with disaggregation (upstream raises); ignored without hybrid replicas."""
    if mode_of(view) != SEPARATE or not view.get_bool(SWITCH):
        return
    if not view.get_bool("actor_rollout_ref.hybrid_engine", True):
        yield Finding(
            "separate_async_hybrid_switch", WARN,
            f"{SWITCH}=true with actor_rollout_ref.hybrid_engine=false: upstream switches it off with a log line "
            "(no colocated replicas on the trainer pool to lend)", (SWITCH, "actor_rollout_ref.hybrid_engine"),
            accepted=f"{SWITCH}=false, or actor_rollout_ref.hybrid_engine=true",
        )
        return
    if view.get_bool(f"{ROLLOUT}.disaggregation.enabled"):
        yield Finding(
            "separate_async_hybrid_switch", ERROR,
            f"{SWITCH}=true with {ROLLOUT}.disaggregation.enabled=true: upstream's separate_async trainer raises "
            f"ValueError in the task runner ({UPSTREAM_SEPARATE}): switching needs paused replicas that queue requests",
            (SWITCH, f"{ROLLOUT}.disaggregation.enabled"),
            accepted=f"one of the two: {SWITCH}=false or {ROLLOUT}.disaggregation.enabled=false",
        )


def hybrid_engine_off(view: ConfigView) -> Iterator[Finding]:
    """``actor_rollout_ref.hybrid_engine=false`` acts in ``separate_async`` only; the other v1 trainers ignore it."""
    if view.get_bool("actor_rollout_ref.hybrid_engine", True) or mode_of(view) == SEPARATE:
        return
    yield Finding(
        "hybrid_engine_off", WARN,
        f"actor_rollout_ref.hybrid_engine=false with {MODE}={mode_of(view)!r}: only upstream's separate_async trainer "
        "reads it (no colocated rollout replicas on the trainer pool); this mode builds them anyway",
        ("actor_rollout_ref.hybrid_engine", MODE),
        accepted=f"actor_rollout_ref.hybrid_engine=true, or {MODE}=separate_async",
    )


SEPARATE_ASYNC_SOURCE = "trainer/ppo/v1/trainer_separate_async.py"


@functools.lru_cache(maxsize=1)
def separate_async_setup_logs_with_flush() -> bool:
    """Whether upstream's ``PPOTrainerSeparateAsync._setup`` passes ``flush=`` to a logger call.

    ``logging.Logger`` accepts no such keyword: the call raises ``TypeError``. In verl 0.9.1 it sits in the
    branch taken with ``actor_rollout_ref.hybrid_engine=false``, after the pools and the model have started.
    """
    path = upstream_path(SEPARATE_ASYNC_SOURCE)
    if path is None:
        return False
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == "_setup":
            return any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                       and isinstance(call.func.value, ast.Name) and call.func.value.id == "logger"
                       and any(k.arg == "flush" for k in call.keywords) for call in ast.walk(node))
    return False


LOG_LEVEL = "VERL_LOGGING_LEVEL"  # upstream's: trainer_separate_async.py sets its module logger to it, "INFO" if unset
RAY_ENV_LOG_LEVEL = f"ray_kwargs.ray_init.runtime_env.env_vars.{LOG_LEVEL}"


def trainer_log_level(view: ConfigView) -> tuple[str, str]:
    """The level upstream's separate_async module logger gets in the task runner, and where it comes from:
    the job's Ray ``runtime_env``, else the launching shell (a driver-local Ray inherits it), else upstream's
    default ``INFO``."""
    from_config = view.get(RAY_ENV_LOG_LEVEL)
    if from_config not in (None, ""):
        return str(from_config).upper(), RAY_ENV_LOG_LEVEL
    if view.environ.get(LOG_LEVEL):
        return view.environ[LOG_LEVEL].upper(), f"{LOG_LEVEL} in the environment"
    return "INFO", f"{LOG_LEVEL} unset (upstream's default INFO)"


def _logs_info(level: str) -> bool:
    import logging

    number = logging.getLevelName(level)
    return not isinstance(number, int) or number <= logging.INFO  # an unknown name: upstream's setLevel raises


def separate_async_hybrid_off_crash(view: ConfigView) -> Iterator[Finding]:
    """``hybrid_engine=false`` in ``separate_async`` where upstream's ``_setup`` would die on its own log line:
    only while that logger emits INFO (``Logger.info`` checks the level before it looks at the keywords)."""
    if mode_of(view) != SEPARATE or view.get_bool("actor_rollout_ref.hybrid_engine", True):
        return
    if not separate_async_setup_logs_with_flush():
        return
    level, source = trainer_log_level(view)
    if not _logs_info(level):
        return
    yield Finding(
        "separate_async_hybrid_off_crash", ERROR,
        f"actor_rollout_ref.hybrid_engine=false with {MODE}='separate_async' and the trainer logging at {level} "
        f"({source}): the installed upstream's PPOTrainerSeparateAsync._setup (verl/{SEPARATE_ASYNC_SOURCE}) then "
        "logs with logger.info(..., flush=True), which Python's logging refuses (TypeError: Logger._log() got an "
        "unexpected keyword argument 'flush') after Ray, the pools and the model have started",
        ("actor_rollout_ref.hybrid_engine", MODE, RAY_ENV_LOG_LEVEL),
        accepted=f"{LOG_LEVEL}=WARN for the trainer ({RAY_ENV_LOG_LEVEL}=WARN, or exported before a driver-local "
                 "launch): the line is then skipped; or actor_rollout_ref.hybrid_engine=true (upstream's default: the "
                 "trainer pool's replicas serve only before the first step unless "
                 "trainer.v1.separate_async.hybrid_rollout.enable_switch=true)",
    )


def warmup_batches_range(view: ConfigView) -> Iterator[Finding]:
    """``num_warmup_batches`` of the async modes: a number; below 0 it is not refused by upstream but skipped
    (``PPOTrainer._add_async_warmup_batches`` returns for ``num_warmup_batches <= 0``), so it warns as what it is:
    no warmup, the same as 0."""
    mode = mode_of(view)
    if mode not in ASYNC_MODES:
        return
    key = f"trainer.v1.{mode}.num_warmup_batches"
    value = view.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        yield Finding("warmup_batches_range", ERROR,
                      f"{key}={value!r}: upstream compares it with 0 and multiplies it by data.train_batch_size "
                      "(prompts added before the first step, fractions allowed)", (key,), accepted="a number >= 0")
    elif value < 0:
        yield Finding("warmup_batches_range", WARN,
                      f"{key}={value!r}: upstream's _add_async_warmup_batches (verl/trainer/ppo/v1/trainer_base.py) "
                      "skips a value <= 0: no prompts are added before the first step, as with 0", (key,),
                      accepted="0 for no warmup, or a number > 0 (batches of data.train_batch_size prompts)")


# ------------------------------------------------------------------------------ engine names
def upstream_path(relative: str) -> Path | None:
    """``relative`` inside the installed upstream ``verl`` package, found without importing it; None if absent."""
    try:
        spec = importlib.util.find_spec("verl")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / relative
    return path if path.exists() else None


def _upstream_engine_dir() -> Path | None:
    folder = upstream_path("checkpoint_engine")
    return folder if folder is not None and folder.is_dir() else None


@functools.lru_cache(maxsize=1)
def upstream_engines() -> dict[str, tuple[tuple[str, str], ...]]:
    """backend name -> ((class, file), ...) from the ``@CheckpointEngineRegistry.register("name")`` decorators
    of upstream's source, read statically: importing ``verl.checkpoint_engine`` imports every engine's
    transport (cupy, torch_npu, nixl). One name may have several classes: ``nccl`` is NCCLCheckpointEngine
    on CUDA and HCCLCheckpointEngine on Ascend NPU (each module imports only where its device library is)."""
    folder = _upstream_engine_dir()
    found: dict[str, list[tuple[str, str]]] = {}
    if folder is None:
        return {}
    for path in sorted(folder.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("CheckpointEngineRegistry.register")
                        and deco.args and isinstance(deco.args[0], ast.Constant) and isinstance(deco.args[0].value, str)):
                    rel = f"verl/{path.relative_to(folder.parent).as_posix()}"
                    found.setdefault(deco.args[0].value, []).append((node.name, rel))
    return {name: tuple(classes) for name, classes in sorted(found.items())}


def upstream_engine_names() -> dict[str, str]:
    """backend name -> its class name(s) in upstream's registry."""
    return {name: " / ".join(c for c, _ in classes) for name, classes in upstream_engines().items()}


# A device's engine module among several registering one name (upstream: "hccl registers the nccl backend
# name on Ascend", verl/checkpoint_engine/__init__.py).
DEVICE_ENGINE_FILES = {"npu": "hccl_", "cuda": "nccl_"}


def engine_class_on(backend: str, device: str) -> tuple[str, str] | None:
    """(class, file) the backend name resolves to on ``device``, per upstream's source; None if unknown."""
    classes = upstream_engines().get(backend, ())
    if len(classes) > 1:
        prefix = DEVICE_ENGINE_FILES.get(device)
        classes = tuple(c for c in classes if prefix and Path(c[1]).name.startswith(prefix)) or classes
    return classes[0] if len(classes) == 1 else None


def checkpoint_engine_unknown(view: ConfigView) -> Iterator[Finding]:
    """A ``checkpoint_engine.backend`` that neither upstream's registry nor the engine module in effect registers
    (the user's ``custom_backend_module``, else the one the device's platform names at launch: ``engine_modules``)."""
    backend = view.get(BACKEND)
    module_key = f"{ENGINE}.custom_backend_module"
    if backend in (None, "naive"):
        return
    module = view.get(module_key) or engine_modules.launch_module(str(view.get("trainer.device")), mode_of(view))
    custom = engine_modules.registered_names(module) if module else frozenset()
    if custom is None:
        yield Finding("checkpoint_engine_unknown", INFO, f"{module_key}={module!r}: its source was not found here; "
                      f"whether it registers {BACKEND}={backend!r} is not checked", (module_key, BACKEND))
        return
    known = upstream_engine_names()
    if not known or backend in known or backend in custom:
        return
    hint = (" (upstream's HCCL engine, verl/checkpoint_engine/hccl_checkpoint_engine.py, registers under the name "
            "'nccl': on Ascend NPU use backend=nccl)" if str(backend).lower() == "hccl" else "")
    where = (f"neither in upstream's CheckpointEngineRegistry nor by {module} ({sorted(custom)})" if module
             else "not in upstream's CheckpointEngineRegistry")
    yield Finding(
        "checkpoint_engine_unknown", ERROR,
        f"{BACKEND}={backend!r} is registered {where}{hint}: upstream's "
        "workers build the engine by that name inside Ray (verl/workers/engine_workers.py, "
        "verl/checkpoint_engine/base.py) and stop there", (BACKEND, module_key),
        accepted=(f"{sorted(custom)} (registered by {module}), " if custom else "")
        + f"one of upstream's {sorted(known)}, or a custom engine with {module_key}",
    )


for _rule in (separate_async_batch, parameter_sync_step_divides, separate_async_rollout_pool, separate_async_nodes,
              separate_async_engine,
              separate_async_reward_model, separate_async_hybrid_switch, separate_async_hybrid_off_crash,
              checkpoint_engine_unknown):
    tag(_rule, launch=True)  # upstream would refuse these inside Ray: VERL_ASCEND_DOCTOR=0 keeps them

RULES = (
    separate_async_batch, parameter_sync_step_divides, separate_async_rollout_pool, separate_async_nodes,
    separate_async_engine,
    separate_async_reward_model, separate_async_hybrid_switch, separate_async_hybrid_off_crash, hybrid_engine_off,
    warmup_batches_range, checkpoint_engine_unknown,
)
