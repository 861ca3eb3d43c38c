"""``python -m verl_ascend.report DIR...`` is the report (same as ``python -m verl_ascend.report.report``)."""

import sys

from verl_ascend.report.report import main

if __name__ == "__main__":
    sys.exit(main())
