"""The Ascend runtime environment of a job: which variables and vLLM switches each process gets, and why.

One concern, one package, imports running one way (each module leans only on those above it here):

- ``table``: the table ``profile.yaml`` (variables, roles, accepted values, ``choose`` rules,
  conflicts, warnings), its condition evaluator and the result types (``EnvProfile``);
- ``wire``: the profile's wire format in ``VERL_ASCEND_ENV_PROFILE``, read back in Ray actors and
  vLLM processes (standard library only);
- ``stack_source`` / ``stack``: the switch surface of the target vLLM / vllm-ascend release, from its
  installed source or a committed snapshot (``snapshots/``);
- ``vllm_switches``: the vLLM / vllm-ascend half of the profile (routes and name checks per release);
- ``profile``: the evaluator and the delivery into the config (``apply_to_config``);
- ``rules``: the profile's conflicts and warnings as findings of ``verl_ascend.checks``;
- commands: ``verl-ascend env`` (print the profile), ``verl-ascend stack-gate``
  (the install gate of an Ascend host); ``vllm_plugin``: vLLM's ``general_plugins`` entry point.

Exit statuses follow the checks' one table (:mod:`verl_ascend.checks.exits`). This ``__init__``
imports nothing, so the platform and the vLLM plugin pay only for ``wire``.
"""
