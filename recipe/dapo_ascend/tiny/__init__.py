"""The embedded default: a tiny task, model, tokenizer and dataset made locally and deterministically.

Used by ``examples/dapo_tiny_cpu.sh`` (``make demo``) and the tests, so the real upstream
trainer runs end to end on a laptop CPU with no hub access.
"""
