"""Upstream's trainer mode in one home (``verl_ascend/trainer_mode.py``): every reader asks it, and the
recipe's trainer for the user's mode is picked in the task runner's ``run`` without renaming the mode.

Without Ray: upstream's own ``TaskRunnerV1.run`` is driven on an instance of the runner class that
:func:`runner_for` builds, with a stub trainer standing in for the recipe's class (it stops the run
where upstream's trainer would start, after upstream printed the config).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from verl_ascend import trainer_mode
from verl_ascend.checks.view import ConfigView

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("recipe", "verl", "verl_ascend")
KEY_TEXT = re.compile(r"trainer\.v1\.trainer_mode\b")


def _names_the_key(path: Path) -> bool:
    """The file reads or names the key: its dotted name in any string, ``"trainer_mode"`` as a string,
    or ``.trainer_mode`` as an attribute (``config.trainer.v1.trainer_mode``, ``args.trainer_mode``).
    Imports of the home module (``from verl_ascend import trainer_mode``) are none of these."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if KEY_TEXT.search(node.value) or node.value == "trainer_mode":
                return True
        elif isinstance(node, ast.Attribute) and node.attr == "trainer_mode":
            return True
    return False


def test_the_key_is_read_in_at_most_three_product_files():
    files = sorted(
        str(p.relative_to(REPO)) for top in PRODUCT for p in (REPO / top).rglob("*.py")
        if not {"tests", "benchmarks", "scripts"} & set(p.relative_to(REPO).parts) and _names_the_key(p)
    )
    assert "verl_ascend/trainer_mode.py" in files  # the check sees the home itself
    assert len(files) <= 3, files


def test_the_file_count_catches_each_way_of_reading_the_key(tmp_path):
    for text in ('x = cfg.get("trainer.v1.trainer_mode", "sync")', 'mode = config.trainer.v1.trainer_mode',
                 'v1.get("trainer_mode")', '"""Reads ``trainer.v1.trainer_mode``."""'):
        (tmp_path / "m.py").write_text(text)
        assert _names_the_key(tmp_path / "m.py"), text
    (tmp_path / "m.py").write_text("from verl_ascend import trainer_mode\nmode = trainer_mode.mode_of(cfg)\n")
    assert not _names_the_key(tmp_path / "m.py")


@pytest.mark.parametrize("wrap", [OmegaConf.create, dict, lambda d: ConfigView(OmegaConf.create(d))],
                         ids=["DictConfig", "dict", "ConfigView"])
def test_mode_of_and_placement_read_every_kind_of_config(wrap):
    def config(mode, hybrid=True):
        return wrap({"trainer": {"v1": {"trainer_mode": mode}}, "actor_rollout_ref": {"hybrid_engine": hybrid}})

    assert trainer_mode.mode_of(wrap({"trainer": {}})) == trainer_mode.DEFAULT == "sync"
    assert trainer_mode.mode_of(config("separate_async")) == "separate_async"
    assert trainer_mode.mode_of(config(None)) == "None"  # upstream's lookup refuses null: so do the checks
    assert trainer_mode.mode_of(config("fully_async")) == "fully_async"
    assert trainer_mode.placement(config("sync", hybrid=False)) == trainer_mode.Placement("sync", True, False)
    assert trainer_mode.placement(config("separate_async")) == trainer_mode.Placement("separate_async", True, True)
    assert trainer_mode.placement(config("separate_async", hybrid="false")) == trainer_mode.Placement("separate_async", False, True)
    assert trainer_mode.placement(config("separate_async", hybrid=None)).trainer_rollout  # null: upstream's default


# -- the recipe's trainer for the user's mode, inside the task runner's run only ----------------------
class _Stop(Exception):
    pass


@pytest.fixture
def stub_trainer(monkeypatch):
    """A trainer registered under a recipe's name for ``sync``; constructing it records the config and stops."""
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    seen = {}

    class StubTrainer(PPOTrainerSync):
        def __init__(self, config):
            seen["mode"] = config.trainer.v1.trainer_mode
            raise _Stop

    monkeypatch.setitem(TRAINER_REGISTRY, "stub_recipe", StubTrainer)
    return StubTrainer, seen


def test_the_runner_binds_the_recipe_trainers_only_inside_run(stub_trainer, monkeypatch, capsys):
    import transfer_queue
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    stub, seen = stub_trainer
    monkeypatch.setattr(transfer_queue, "init", lambda config: None)
    monkeypatch.setattr(transfer_queue, "close", lambda: None)
    runner = trainer_mode.runner_for(TaskRunnerV1, {"sync": "stub_recipe"})
    cls = runner.__ray_actor_class__
    assert cls.__name__ == "TaskRunnerV1" and issubclass(cls, TaskRunnerV1.__ray_actor_class__)

    config = OmegaConf.create({"trainer": {"v1": {"trainer_mode": "sync"}}, "transfer_queue": {"enable": False}})
    with pytest.raises(_Stop):
        cls().run(config)  # upstream's run: get_trainer_cls(the config's mode), pprint(config), the trainer
    assert seen["mode"] == "sync" == config.trainer.v1.trainer_mode  # upstream's trainer reads the user's mode
    assert "'trainer_mode': 'sync'" in capsys.readouterr().out  # upstream's printed config: the user's mode
    assert get_trainer_cls("sync") is PPOTrainerSync  # outside run: upstream's own registry, as upstream left it


def test_upstreams_own_runner_is_untouched(stub_trainer):
    """Upstream's ``main_ppo`` launched without the recipe: its runner class and registry stay as shipped."""
    from verl.trainer.main_ppo import TaskRunnerV1
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    upstream_run = TaskRunnerV1.__ray_actor_class__.run
    trainer_mode.runner_for(TaskRunnerV1, {"sync": "stub_recipe"})
    assert TaskRunnerV1.__ray_actor_class__.run is upstream_run and get_trainer_cls("sync") is PPOTrainerSync


def test_the_binding_restores_upstreams_classes_and_refuses_what_is_not_a_mode(stub_trainer):
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

    stub, _ = stub_trainer
    with pytest.raises(RuntimeError, match="inside"):
        with trainer_mode.recipe_trainers({"separate_async": "stub_recipe"}):
            assert get_trainer_cls("separate_async") is stub
            raise RuntimeError("inside")
    assert get_trainer_cls("separate_async") is PPOTrainerSeparateAsync
    with pytest.raises(ValueError, match=r"\['fully_async'\] are not upstream's modes"):
        with trainer_mode.recipe_trainers({"fully_async": "stub_recipe"}):
            pass
    with pytest.raises(ValueError, match="Unknown trainer 'not_registered'"):
        with trainer_mode.recipe_trainers({"sync": "not_registered"}):
            pass
