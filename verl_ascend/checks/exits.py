"""The one exit-status table of every check command: the doctor, ``DRY_RUN=1``, the env CLI, the stack gate.

==========  ====  ==========================================================================================
name        code  meaning
==========  ====  ==========================================================================================
``OK``      0     accepted: nothing blocks (warnings and notes are printed; under ``--strict`` /
                  ``VERL_ASCEND_DOCTOR_STRICT=1`` a warning blocks)
``FAILED``  1     the command itself failed (an uncaught exception, a file it could not write): no verdict
                  on the input was reached; Python's own status for a traceback
``REFUSED`` 2     refused: an error finding (a warning too, under strict), a config that does not compose
                  or has a key of the wrong type or range, a rule of the env profile broken, an install
                  that does not match the pins, a bad argument (argparse's own usage status)
==========  ====  ==========================================================================================

Why one table with refusal at 2: the launch (``main_dapo``) refuses a start with 2 before Ray starts,
and a script that runs ``DRY_RUN=1`` or the doctor first must read the same verdict the same way;
1 stays what Python returns for a crash, so "fix your input" and "the tool broke" never share a code.
"""

from __future__ import annotations

OK, FAILED, REFUSED = 0, 1, 2
