"""RunPaths: the one place a run's folders are derived (entry point, resume and data check agree)."""

from __future__ import annotations

from omegaconf import OmegaConf

from verl_ascend.paths import RunPaths


def _config(logger=("console", "file"), experiment="exp1", ckpt="ckpts/exp1"):
    return OmegaConf.create({"trainer": {"experiment_name": experiment, "logger": list(logger), "default_local_dir": ckpt}})


def test_defaults_under_the_output_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    paths = RunPaths.of(_config(), {"VERL_ASCEND_OUTPUT_DIR": "out"})
    assert paths.output_dir == str(tmp_path / "out")
    assert paths.run_dir == str(tmp_path / "out" / "exp1")
    assert paths.metrics == paths.default_metrics == str(tmp_path / "out" / "exp1" / "metrics.jsonl")
    assert paths.clean_data == str(tmp_path / "out" / "exp1" / "clean_data")
    assert paths.checkpoints == str(tmp_path / "ckpts" / "exp1")


def test_file_logger_path_moves_only_the_metrics_file(tmp_path):
    """The journal stays in the run folder (which `make demo` cleans), wherever the metrics go."""
    environ = {"VERL_ASCEND_OUTPUT_DIR": str(tmp_path / "out"), "VERL_FILE_LOGGER_PATH": str(tmp_path / "elsewhere" / "m.jsonl")}
    paths = RunPaths.of(_config(), environ)
    assert paths.metrics == str(tmp_path / "elsewhere" / "m.jsonl")
    assert paths.run_dir == str(tmp_path / "out" / "exp1")
    assert paths.clean_data == str(tmp_path / "out" / "exp1" / "clean_data")


def test_without_the_file_logger_there_is_no_metrics_file(tmp_path):
    paths = RunPaths.of(_config(logger="console"), {"VERL_ASCEND_OUTPUT_DIR": str(tmp_path)})
    assert paths.metrics is None and paths.run_dir == str(tmp_path / "exp1")


def test_output_dir_defaults_to_outputs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert RunPaths.of(_config(), {}).output_dir == str(tmp_path / "outputs")
