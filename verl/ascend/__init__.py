"""verl.ascend: the Ascend NPU backend of verl-ascend."""
