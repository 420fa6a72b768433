"""RecorderCost: where a Recorder's time went on this rank, and what its writer wrote.

>>> cost = RecorderCost(steps=10, recorded=2, hook_seconds=0.002, step_seconds=0.001)
>>> round(cost.seconds, 3)
0.003
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import RECORD

__all__ = ["RecorderCost"]


@dataclass
class RecorderCost:
    """Where the recorder's time went (this rank), and what it wrote (writer rank).

    ``hook_seconds``: counting and reducing values, at the hooks or in ``step()`` (values held
    until then); ``step_seconds``: the rest of ``step()`` (merge, exchange, writing).
    """

    steps: int = 0
    recorded: int = 0
    hook_seconds: float = 0.0
    step_seconds: float = 0.0
    bytes_written: int = 0
    record_size: int = RECORD.size

    @property
    def seconds(self) -> float:
        return self.hook_seconds + self.step_seconds

    def __str__(self) -> str:
        per = self.seconds / self.recorded * 1e3 if self.recorded else 0.0
        return (f"{self.recorded} of {self.steps} steps recorded; {self.seconds:.3f} s in the "
                f"recorder ({per:.2f} ms per recorded step: values {self.hook_seconds:.3f} s, "
                f"the rest of step() {self.step_seconds:.3f} s); {self.bytes_written} bytes "
                f"written ({self.record_size} per record)")  # fmt: skip
