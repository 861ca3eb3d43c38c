"""The launch checks of ``preflight.py`` as rules of the one pipeline (``verl_ascend.checks.validate``).

Each wraps a check that raises ``PreflightError`` naming the key, file or row at fault; the message
becomes an error finding unchanged. Upstream's ``validate_config`` runs here too: its assertion becomes
an error finding that quotes what upstream said.
"""

from __future__ import annotations

from verl_ascend.checks import preflight
from verl_ascend.checks.pipeline import INPUTS, from_check

# (Upstream's config dataclasses are built by rules_effective.upstream_config_objects, a gate rule.)
upstream_validate_config = from_check(
    "upstream_validate_config", preflight.run_upstream_validation, (preflight.PreflightError,)
)
model_unusable = from_check("model_unusable", preflight.check_model, (preflight.PreflightError,), stage=INPUTS)
data_rows_bad = from_check(
    "data_rows_bad", preflight.check_data, (preflight.PreflightError,), stage=INPUTS, needs=("model_unusable",)
)

RULES = (model_unusable, data_rows_bad, upstream_validate_config)
