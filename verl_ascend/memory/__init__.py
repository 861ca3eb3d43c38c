"""The memory plan: will a composed job fit its device, phase by phase, before a card is touched.

Why here, in the neutral toolkit: the plan runs the model class named by the checkpoint's ``config.json``
and verl's own micro-batch path under torch's fake tensors, and reads the rollout engine's own KV
accounting; a backend contributes only what its device changes (fused-op replacements, device memory).
"""
