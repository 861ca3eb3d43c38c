"""``python -m verl.ascend.profiler DIR...`` is the report (same as ``python -m verl.ascend.profiler.report``)."""

import sys

from verl.ascend.profiler.report import main, relaunch_without_upstream_init

if __name__ == "__main__":
    relaunch_without_upstream_init("verl.ascend.profiler.report")
    sys.exit(main())
