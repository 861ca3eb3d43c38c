"""The acceptance run of an Ascend host, ``verl-ascend accept`` (:mod:`verl.ascend.accept.cli`).

Why one command: each switch of this backend (the stack, the fused ops, the env profile, the
profiler) is tested piecewise on CPU, but a fresh host can still fail where the pieces meet the
device. This command proves each on the device, in the order a failure would explain the next, and
leaves one report. It reuses the pieces it checks (``verl.ascend.env.stack``, the emulator's reference
ops, the vLLM general plugin, the recipe's tiny DAPO, ``verl_ascend.report``) and duplicates none.
"""
