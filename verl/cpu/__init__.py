"""verl.cpu: the CPU backend of verl-ascend (a ``cpu`` platform, an ``hf`` rollout server, and the hooks that run upstream's vLLM rollout on vLLM's CPU build)."""
