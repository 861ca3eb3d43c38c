"""Hardware/kernel contract limits of the torch_npu fused ops, shared by the product ops and the emulator.

The product op (``forwards.py``) falls back to the original forward outside these limits; the emulator
(``emulator/fused_ops.py``) refuses the same calls the real kernel refuses. One number, one home: the ops.
"""

ROTARY_MAX_HEAD_DIM = 896  # exclusive upper bound on D documented for npu_rotary_mul
