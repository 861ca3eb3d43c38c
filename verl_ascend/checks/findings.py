"""What a rule of the validation pipeline reports, and the error that stops a run.

A finding says what would happen if the run started as configured and what to change, and names
the config keys or environment variables involved, so a user can act on it without reading the
doctor's code.
"""

from __future__ import annotations

from dataclasses import dataclass

ERROR = "error"  # the run would not do what was asked (a silent no-op, a conflict, a late crash)
WARN = "warn"  # the run would work but waste time or cards; an error under --strict
INFO = "info"  # a check that could not run, or a finding a user chose to ignore
SEVERITIES = (ERROR, WARN, INFO)


@dataclass(frozen=True)
class Finding:
    rule: str  # short stable id, e.g. "overlong_buffer_too_long"
    severity: str  # one of SEVERITIES
    message: str  # what would happen, then what to change
    keys: tuple[str, ...] = ()  # config keys / environment variables involved
    accepted: str = ""  # what would be accepted instead, when the message does not already say it

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")

    def __str__(self) -> str:
        keys = f" [{', '.join(self.keys)}]" if self.keys else ""
        accepted = f"; accepted: {self.accepted}" if self.accepted else ""
        return f"[{self.severity}] {self.rule}: {self.message}{accepted}{keys}"


class DoctorError(ValueError):
    """The doctor refuses the run; ``findings`` are the blocking ones (errors, plus warnings if strict)."""

    def __init__(self, findings: list[Finding], strict: bool = False):
        self.findings = list(findings)
        self.strict = strict
        what = "problem" if len(self.findings) == 1 else "problems"
        lines = [f"checks refused this run ({len(self.findings)} {what}{', strict' if strict else ''}):"]
        lines += [f"  - {finding}" for finding in self.findings]
        super().__init__("\n".join(lines))

    @property
    def rules(self) -> list[str]:
        return [finding.rule for finding in self.findings]
