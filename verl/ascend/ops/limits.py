"""Hardware/kernel contract limits of the torch_npu fused ops, shared by the product ops and the emulator.

The product op (``forwards.py``) falls back to the original forward outside these limits; the emulator
(``emulator/fused_ops.py``) refuses the same calls the real kernel refuses. One number, one home: the ops.
"""

ROTARY_MAX_HEAD_DIM = 896  # exclusive upper bound on D documented for npu_rotary_mul

# The documented accuracy of each fused op, per dtype: |y - ref| <= rtol * |ref| + atol against a
# reference computed from the same inputs at higher precision (tests/npu, ``verl-ascend
# accept``). rtol: two roundings to the dtype (unit roundoff 2**-8 bf16, 2**-11 fp16);
# attention adds an absolute 1e-2 in half precision (a softmax-weighted sum of rounded values).
ELEMENTWISE_TOLERANCES = {"float32": (1e-5, 1e-5), "bfloat16": (2.0**-7, 1e-5), "float16": (2.0**-10, 1e-5)}
OP_TOLERANCES = {
    "npu_rms_norm": ELEMENTWISE_TOLERANCES,
    "npu_swiglu": ELEMENTWISE_TOLERANCES,
    "npu_rotary_mul": ELEMENTWISE_TOLERANCES,
    "npu_fusion_attention": {"float32": (1e-5, 1e-5), "bfloat16": (2.0**-7, 1e-2), "float16": (2.0**-7, 1e-2)},
}
