"""Every config the recipe ships passes its own doctor under ``--strict`` (warnings refuse too): a shipped
config that the project's own checks call wrong would teach users to ignore them."""

from __future__ import annotations

import pytest

from tests.recipe.helpers import REPO
from verl_ascend.checks import exits

CONFIG_DIR = REPO / "recipe" / "dapo_ascend" / "config"
# Primary configs name Hydra's searchpath; the others (dapo_base, tiny_cpu) are only building blocks.
SHIPPED = sorted(p.stem for p in CONFIG_DIR.glob("*.yaml") if "searchpath:" in p.read_text())


def test_the_shipped_configs_are_found():
    assert {"dapo_tiny_cpu", "dapo_demo_cpu", "dapo_tail_cpu", "dapo_qwen25_32b_npu"} <= set(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_doctor_strict_accepts_the_shipped_config(name, capsys, monkeypatch):
    from verl_ascend.launch.commands import doctor

    for var in ("VERL_ASCEND_DOCTOR_IGNORE", "VERL_ASCEND_DOCTOR_STRICT"):
        monkeypatch.delenv(var, raising=False)
    code = doctor(["--strict", "--config-name", name])
    out = capsys.readouterr()
    assert code == exits.OK, out.out[-3000:] + out.err[-3000:]
    assert "doctor verdict: OK" in out.out and "0 warning(s)" in out.out


def test_vllm_runs_of_the_tiny_configs_stay_eager():
    """tiny_cpu's enforce_eager moved to engine_kwargs.vllm: upstream's vLLM server builds its `vllm serve`
    arguments with its own enforce_eager first and **engine_kwargs after, so the engine still runs eager."""
    import inspect

    from recipe.dapo_ascend.main_dapo import RECIPE
    from verl.workers.rollout.vllm_rollout import vllm_async_server

    source = inspect.getsource(vllm_async_server.vLLMHttpServer)
    own, merged = source.index('"enforce_eager": self.config.enforce_eager'), source.index("**engine_kwargs,")
    assert own < merged  # a later key wins in a dict display
    config = RECIPE.compose("dapo_tiny_cpu", ["actor_rollout_ref.rollout.name=vllm"])
    rollout = config.actor_rollout_ref.rollout
    args = {"enforce_eager": rollout.enforce_eager, **rollout.engine_kwargs.vllm}
    assert args["enforce_eager"] is True and rollout.enforce_eager is False  # upstream's default, not read on hf
