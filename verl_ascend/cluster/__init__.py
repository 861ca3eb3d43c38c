"""``verl-ascend cluster``: every node of a running Ray cluster checked, and compared, before a job loads anything.

The neutral mechanism lives here: what the job needs (:mod:`job`), what a node sees (:mod:`probe`), the
comparison against the driver's view (:mod:`compare`), a bounded collective (:mod:`collective`), the table
(:mod:`table`) and the command (:mod:`command`). What only a device can probe (npu-smi, hccn_tool, visible
devices, the stack gate) comes from the platform of ``trainer.device`` (``DeviceHooks.cluster_probe``).
"""
