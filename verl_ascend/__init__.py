"""verl-ascend's neutral top-level package: device- and recipe-independent tooling (seams, ...)."""
