"""The ``hf`` rollout: a transformers-based token-in/token-out server for CPU machines.

- ``engine``: batched sampling with a KV cache (pure torch, no Ray), the numerics.
- ``server``: the Ray actor that batches concurrent requests and serves upstream's server API.
- ``replica``: the ``RolloutReplica`` that launches one server per replica.
- ``adapter``: the worker-side ``BaseRollout`` that pushes trainer weights to its server.
"""
