"""verl.cpu: the CPU backend of verl-ascend (a ``cpu`` platform and an ``hf`` rollout server)."""
