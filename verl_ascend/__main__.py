"""``python -m verl_ascend <command>``: the ``verl-ascend`` console script for a script that has an
interpreter but not the venv's bin on PATH (``"${PYTHON:-python}" -m verl_ascend train ...``)."""

from verl_ascend.cli import entry

if __name__ == "__main__":
    entry()
