"""Deprecated alias of ``python -m verl_ascend.report.report`` (kept for one release)."""

import runpy

if __name__ == "__main__":
    runpy.run_module("verl_ascend.report.report", run_name="__main__", alter_sys=True)
