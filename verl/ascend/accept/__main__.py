"""``python -m verl.ascend.accept``: see :mod:`verl.ascend.accept.cli`."""

from verl.ascend.accept.cli import main

raise SystemExit(main())
