"""``verl-ascend cluster``'s refusals before it contacts Ray (fast; the cluster itself: test_cluster_e2e.py)."""

from __future__ import annotations

import pytest

from verl_ascend.checks import exits
from verl_ascend.cluster import command


def test_a_config_that_does_not_compose_is_refused_by_name(capsys):
    assert command.main(["trainer.nnodes=2", "--json", "trainer.no_such_key=1"]) == exits.REFUSED  # options between overrides
    err = capsys.readouterr().err
    assert err.startswith("verl-ascend cluster: not ready:") and "trainer.no_such_key" in err


def test_a_legacy_reward_key_without_plus_is_refused_with_its_new_home(capsys):
    assert command.main(["reward_model.overlong_buffer.len=8"]) == exits.REFUSED
    assert "reward_model.overlong_buffer.len -> reward.reward_kwargs.overlong_buffer_cfg.len" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["--timeout", "0"], ["--collective-mib", "-1"]])
def test_bad_arguments_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        command.main(argv)
    assert stop.value.code == exits.REFUSED and "must be positive" in capsys.readouterr().err
