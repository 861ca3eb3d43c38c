"""Nothing silently accepted, nothing lost: every bad input below is refused by the real entry
point before Ray starts (exit 2, the key named on stderr, no traceback), and a refused start leaves
every byte of an existing run's output folder as it was (checksums before and after).

Each case runs the entry point in this process (``entry``, tests/recipe/conftest.py: Hydra's compose,
then ``main_with_config``; Ray replaced by a stub that must never be called) with real files (models,
data, output folders). One case stays a subprocess of ``python -m verl_ascend train``
(marker ``e2e``): what Hydra's own launch writes into the working directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from tests.launch import require_e2e
from tests.recipe.helpers import REPO


def _assert_refused_cleanly(result, *needles):
    text = result.stderr + result.stdout
    assert result.returncode == 2, text[-3000:]
    for needle in needles:
        assert needle in result.stderr, (needle, text[-3000:])
    assert result.stderr.count("[verl-ascend] error: ") <= 1, text[-3000:]  # one refusal, on stderr
    assert "Traceback" not in text, text[-3000:]
    assert "ray init kwargs" not in text and "Started a local Ray" not in text  # Ray never started


# ----------------------------------------------------------------------------- the typed view
CONFIG_CASES = [
    # (overrides, what the message must name)
    (["actor_rollout_ref.rollout.n=0"], ["actor_rollout_ref.rollout.n=0", "integer >= 1"]),
    (["trainer.total_training_steps=0"], ["trainer.total_training_steps=0", "integer >= 1"]),
    (["trainer.total_training_steps=-4"], ["trainer.total_training_steps=-4"]),
    (["data.train_batch_size=8.5"], ["data.train_batch_size=8.5", "integer >= 1"]),
    (["data.train_batch_size=abc"], ["data.train_batch_size='abc'"]),
    (["actor_rollout_ref.rollout.name=nonexistent"], ["actor_rollout_ref.rollout.name='nonexistent'", "'hf'", "'vllm'"]),
    (["actor_rollout_ref.actor.optim.lr=fast"], ["actor_rollout_ref.actor.optim.lr='fast'", "number > 0"]),
    (["actor_rollout_ref.rollout.temperature=-1"], ["actor_rollout_ref.rollout.temperature=-1", "number > 0"]),
    (["actor_rollout_ref.rollout.top_p=1.5"], ["actor_rollout_ref.rollout.top_p=1.5", "(0, 1]"]),
    (["trainer.resume_mode=sometimes"], ["trainer.resume_mode='sometimes'", "'auto'", "'resume_path'"]),
    (["trainer.experiment_name=../../../escaped"], ["trainer.experiment_name='../../../escaped'", "plain folder name"]),
    (["trainer.n_gpus_per_node=0"], ["trainer.n_gpus_per_node=0"]),
    (["data.train_files=5"], ["data.train_files=5", "parquet file path"]),
    (["trainer.save_freq=0"], ["trainer.save_freq=0", "fault_tolerance.allow_no_checkpoints=true"]),
    (["trainer.save_freq=-1"], ["trainer.save_freq=-1", "trainer.save_freq >= 1"]),
    # Upstream's old reward keys reach the migration message on the first try (not Hydra's "+" hint).
    (["reward_model.overlong_buffer.len=8"], ["reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len"]),
    (["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.penalty_factor=1.0"],
     ["reward.reward_kwargs.overlong_buffer_cfg.enable", "reward.reward_kwargs.overlong_buffer_cfg.penalty_factor"]),
]


@pytest.mark.parametrize("overrides, needles", CONFIG_CASES, ids=[" ".join(c[0]) for c in CONFIG_CASES])
def test_bad_value_is_refused_before_ray(entry, tmp_path, overrides, needles):
    # Upstream's old keys without "+" do not compose: the train command names their new keys before Hydra does.
    legacy = overrides[0].startswith("reward_model.")
    r = entry.cli(*overrides) if legacy else entry(*overrides)
    _assert_refused_cleanly(r, *needles)
    assert not legacy or r.stderr.startswith("[verl-ascend] error: cannot compose the config"), r.stderr  # the launch's line
    assert entry.started == [] and not (tmp_path / "out").exists()  # a refused start writes nothing


@pytest.mark.e2e
def test_refused_start_writes_no_hydra_folder(tiny_dir, tmp_path):
    """Run from an empty working directory: Hydra's ./outputs/<date>/<time>/ must not appear."""
    import subprocess
    import sys

    env = {**os.environ, "VERL_ASCEND_TINY_DIR": str(tiny_dir), "VERL_ASCEND_OUTPUT_DIR": str(tmp_path / "out"),
           "PYTHONPATH": str(REPO)}
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    require_e2e("the recipe's entry point")
    r = subprocess.run([sys.executable, "-m", "verl_ascend", "train", "trainer.save_freq=0"],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    _assert_refused_cleanly(r, "trainer.save_freq=0")
    assert list(cwd.iterdir()) == [] and not (tmp_path / "out").exists()


def test_dry_run_and_doctor_apply_the_same_view(entry, tmp_path, monkeypatch, capsys):
    """``DRY_RUN=1`` and ``verl-ascend doctor --strict`` refuse what the launch refuses."""
    from verl_ascend.launch import commands

    monkeypatch.setenv("DRY_RUN", "1")
    dry = entry("data.train_batch_size=abc")
    assert dry.returncode == 2 and "data.train_batch_size='abc'" in dry.stderr, dry.stderr[-2000:]
    monkeypatch.delenv("DRY_RUN")
    code = commands.doctor(["--strict", "--config-name", "dapo_tiny_cpu", "actor_rollout_ref.rollout.n=0"])
    err = capsys.readouterr().err
    assert code == 2 and "actor_rollout_ref.rollout.n=0" in err, err[-2000:]
    assert "Traceback" not in dry.stderr + err
    assert entry.started == [] and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- bad files
def _model_copy(tiny_dir: Path, tmp_path: Path) -> Path:
    model = tmp_path / "model"
    shutil.copytree(tiny_dir / "model", model)
    return model


def _empty_config(model: Path) -> None:
    (model / "config.json").write_text("{}")


def _garbage_config(model: Path) -> None:
    (model / "config.json").write_bytes(b"\x00\xffnot json at all")


def _no_tokenizer(model: Path) -> None:
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (model / name).unlink(missing_ok=True)


def _huge_weights(model: Path) -> None:
    """A safetensors header declaring 10^13 parameters: one checkpoint would need ~100 TiB."""
    header = json.dumps({"big": {"dtype": "F32", "shape": [10**13], "data_offsets": [0, 0]}}).encode()
    (model / "extra.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)


MODEL_CASES = [
    (_empty_config, ["config.json", "names no model_type"]),
    (_garbage_config, ["config.json", "is not valid JSON"]),
    (_no_tokenizer, ["actor_rollout_ref.model.path", "tokenizer"]),
    (_huge_weights, ["trainer.default_local_dir", "GiB free", "needs about"]),
]


@pytest.mark.parametrize("damage, needles", MODEL_CASES, ids=[c[0].__name__ for c in MODEL_CASES])
def test_bad_model_folder_is_refused(entry, tiny_dir, tmp_path, damage, needles):
    model = _model_copy(tiny_dir, tmp_path)
    damage(model)
    before = _digest_tree(model)
    r = entry(f"actor_rollout_ref.model.path={model}")
    _assert_refused_cleanly(r, *needles)
    assert entry.started == [] and not (tmp_path / "out").exists() and _digest_tree(model) == before


def test_folder_given_as_train_files(entry, tiny_dir, tmp_path):
    r = entry(f"data.train_files={tiny_dir / 'data'}")
    _assert_refused_cleanly(r, "data.train_files", "is a folder", "parquet file")
    assert entry.started == [] and not (tmp_path / "out").exists()


def test_checkpoint_dir_under_a_regular_file(entry, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    r = entry(f"trainer.default_local_dir={blocker}/ckpt")
    _assert_refused_cleanly(r, "trainer.default_local_dir", "is a file, not a folder")
    assert blocker.read_text() == "x" and entry.started == [] and not (tmp_path / "out").exists()


def test_output_folder_under_a_regular_file(entry, tmp_path, monkeypatch):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(blocker / "out"))
    r = entry("data.skip_bad_rows=true")
    _assert_refused_cleanly(r, "is a file, not a folder")
    assert blocker.read_text() == "x" and entry.started == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder(entry, tmp_path, monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(0o555)
    monkeypatch.setenv("VERL_ASCEND_OUTPUT_DIR", str(out))
    try:
        r = entry()
    finally:
        out.chmod(0o755)
    _assert_refused_cleanly(r, "cannot write in")
    assert list(out.iterdir()) == [] and entry.started == []


# ----------------------------------------------------------------------------- history kept
def _digest_tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def finished_run(tmp_path) -> Path:
    """An output folder as a finished 4-step run leaves it: metrics, prompt ledger, checkpoints."""
    out = tmp_path / "out"
    run_dir = out / "dapo_tiny_cpu"
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "data": {"x": s}}) + "\n" for s in range(1, 5)))
    (run_dir / "prompts.jsonl").write_text("".join(json.dumps({"step": 1 + i // 25, "index": [i]}) + "\n" for i in range(97)))
    (run_dir / "rollout_groups.jsonl").write_text(json.dumps({"step": 4, "event": "trained", "uids": ["a"]}) + "\n")
    ckpt = out / "checkpoints" / "dapo_tiny_cpu" / "global_step_4"
    (ckpt / "actor").mkdir(parents=True)
    (ckpt / "actor" / "model_world_size_1_rank_0.pt").write_bytes(os.urandom(4096))
    (ckpt / "data.pt").write_bytes(b"d" * 10)
    from verl_ascend.run import checkpoints
    checkpoints.write_marker(str(ckpt), 4)
    (ckpt.parent / checkpoints.TRACKER).write_text("4")
    return out


HISTORY_CASES = [
    # A mistyped checkpoint folder and a config the doctor refuses (the reproduction).
    # (len 9 > max_resp_len 8: upstream's dapo reward manager asserts when it starts)
    (["trainer.default_local_dir=/typo", "reward.reward_kwargs.overlong_buffer_cfg.len=9"], ["overlong"]),
    # Valid config, but the run would resume nothing on top of 4 recorded steps.
    (["trainer.default_local_dir={out}/nowhere"], ["holds the history", "up to step 4", "fault_tolerance.start_over=true"]),
    (["trainer.resume_mode=disable"], ["holds the history", "trainer.resume_mode=disable"]),
    # Checkpoints deleted.
    (["trainer.default_local_dir={out}/checkpoints/other"], ["holds the history", "new trainer.experiment_name"]),
    # Bad values, refused by the typed view.
    (["actor_rollout_ref.rollout.n=0"], ["actor_rollout_ref.rollout.n=0"]),
]


@pytest.mark.parametrize("overrides, needles", HISTORY_CASES, ids=[" ".join(c[0]) for c in HISTORY_CASES])
def test_refused_start_leaves_every_byte(entry, finished_run, overrides, needles):
    before = _digest_tree(finished_run)
    overrides = [o.replace("{out}", str(finished_run)) for o in overrides]
    r = entry(*overrides)
    _assert_refused_cleanly(r, *needles)
    assert _digest_tree(finished_run) == before and entry.started == []
    assert not Path("/typo").exists()


def test_rerun_after_the_final_step_says_why_nothing_trains(entry, finished_run):
    before = _digest_tree(finished_run)
    r = entry("trainer.total_training_steps=4")
    text = r.stdout + r.stderr
    assert r.returncode == 0, text[-3000:]
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("[verl-ascend] nothing to train")]  # stdout: no error
    assert "step 4" in line and "trainer.total_training_steps=4" in line and "Ray was not started" in line
    assert "error" not in r.stderr and entry.started == []
    assert _digest_tree(finished_run) == before


def test_rollout_engine_names_are_read_from_upstreams_registry(monkeypatch):
    """Reads ``RolloutReplicaRegistry._registry`` (verl 0.9.1 ``workers/rollout/replica.py``), the dict
    ``register`` writes: fails when upstream renames it, so a new engine is never refused."""
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    from recipe.dapo_ascend import config_schema

    assert {"vllm", "sglang", "hf"} <= set(config_schema.rollout_names())
    monkeypatch.setitem(RolloutReplicaRegistry._registry, "my_engine", lambda: None)
    RolloutReplicaRegistry.register("my_engine2", lambda: None)
    try:
        assert {"my_engine", "my_engine2"} <= set(config_schema.rollout_names())
    finally:
        RolloutReplicaRegistry._registry.pop("my_engine2")
