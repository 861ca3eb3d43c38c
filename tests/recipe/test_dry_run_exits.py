"""``verl-ascend dry-run`` on real bad input: the checks' one table (``verl_ascend.checks.exits``)."""

from __future__ import annotations

import pytest

from verl_ascend.launch import commands
from verl_ascend.checks import exits


@pytest.mark.parametrize("argv, named", [
    (["--config-name", "no_such_config"], "no_such_config"),  # does not compose
    (["actor_rollout_ref.rollout.no_such_key=1"], "no_such_key"),  # a key upstream's schema lacks
])
def test_input_that_does_not_compose_is_refused_naming_it(argv, named, capsys):
    assert commands.dry_run_cli(argv) == exits.REFUSED
    err = capsys.readouterr().err
    assert err.startswith("error: ") and named in err


def test_a_bad_argument_is_refused(capsys):
    with pytest.raises(SystemExit) as stop:
        commands.dry_run_cli(["--no-such-flag"])
    assert stop.value.code == exits.REFUSED and "--no-such-flag" in capsys.readouterr().err
