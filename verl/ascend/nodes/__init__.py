"""The Ascend backend's probes of a node for ``verl-ascend cluster``: npu-smi, hccn_tool, visible devices, stack gate."""
