"""The embedded default: a tiny task, model, tokenizer and dataset made locally and deterministically.

Shipped in the wheel because users run it: ``make demo`` (``examples/dapo_tiny_cpu.sh``), the
acceptance run (``verl-ascend accept``), the shipped configs ``tiny_cpu``/``dapo_tiny_cpu``
(their reward is ``pkg://recipe.dapo_ascend.tiny.task``), ``dapo_tail_cpu`` (``--workload tail``) and the
balanced workload of ``benchmarks/trainer_modes.py`` (``--workload steady``).
It is also the tests' one source of tiny models: ``tests/conftest.py``'s ``tiny_dir`` builds these
assets, and tests/npu builds its fused-op models with ``assets.build_model`` (``arch``, ``overrides``).
Test-only helpers live under tests/.
"""
