"""Recorded steps on their way to disk: reduced buckets kept, then merged and written together.

Merging a step's numbers and writing one record per key costs about the same for one step as
for hundreds (a few dozen numpy calls and one write per key file), so the writer rank keeps each
recorded step's numbers (its display bins re-binned at once: they are all that is kept of the
buckets) and turns a batch of them into records at once. The kept steps are written when they
are :data:`MAX_STEPS` (or :data:`MAX_BYTES`), when the last write is :data:`MAX_AGE` seconds
old (checked at every ``rec.step()`` and every heartbeat, so a paused training loop still gets
its records out), and at close or a stop signal. A slow loop (a record every ``MAX_AGE``
seconds or more) writes each record at once; a process killed outright (SIGKILL) loses at most
the last half second.

>>> import tempfile, numpy as np
>>> from surgeon_widgets.record.layout import Key, MAX_WIDTH, SUM_WIDTH, FINITE, HAS, SUM
>>> from surgeon_widgets.record.runfolder import RunWriter
>>> folder = tempfile.mkdtemp()
>>> writer = RunWriter(folder, {"keys": []}, [Key(0, "fc/output", "fc", "output", "activation")])
>>> pending = Pending(writer, keys=1)
>>> sums, maxes = np.zeros((1, SUM_WIDTH)), np.full((1, MAX_WIDTH), -np.inf)
>>> sums[0, [HAS, FINITE, SUM]] = 1, 4, 10.0
>>> for step in range(3):  # the first is written at once, the next ones wait for MAX_AGE
...     pending.add(step, sums, maxes, np.zeros((1, 64)))
>>> pending.steps, pending.flush(), pending.steps  # two records of 480 bytes, one write
(2, 960, 0)
>>> writer.close()
"""

from __future__ import annotations

import threading
import time

import numpy as np

from .layout import BINS, HIST, MAX_WIDTH
from .merge import merge
from .runfolder import RunWriter

__all__ = ["MAX_AGE", "MAX_BYTES", "MAX_STEPS", "Pending"]

MAX_STEPS = 256
MAX_BYTES = 8 << 20
MAX_AGE = 0.5  # seconds


class Pending:
    """The writer rank's recorded steps not yet written: ``add`` each, ``flush`` writes them.

    A step is kept as its count columns, its maxes and its display bins: the buckets themselves
    are not copied. Thread-safe: the
    training thread adds, the heartbeat thread may flush an old batch.
    """

    def __init__(self, writer: RunWriter, keys: int) -> None:
        self._writer = writer
        capacity = max(1, min(MAX_STEPS, MAX_BYTES // (8 * keys * (HIST + MAX_WIDTH + BINS))))
        self._steps = np.zeros(capacity, dtype=np.int64)
        self._sums = np.zeros((capacity, keys, HIST))
        self._maxes = np.zeros((capacity, keys, MAX_WIDTH))
        self._hists = np.zeros((capacity, keys, BINS))
        self._count = 0
        self._written_at = -MAX_AGE  # monotonic time of the last write
        self._lock = threading.Lock()

    @property
    def steps(self) -> int:
        """How many recorded steps wait to be written."""
        return self._count

    def add(self, step: int, sums: np.ndarray, maxes: np.ndarray, bins: np.ndarray) -> None:
        """Keep one step's reduced buckets (its counts and maxes) and display ``bins``
        (:func:`.merge.display_bins`); write the batch when it is due."""
        with self._lock:
            i = self._count
            self._steps[i] = step
            self._sums[i], self._maxes[i], self._hists[i] = sums[:, :HIST], maxes, bins
            self._count = i + 1
            if self._count == len(self._steps) or self._old():
                self._write()

    def flush(self, old_only: bool = False, wait: bool = True) -> int:
        """Write the kept steps now (``old_only``: only if the batch is due); return bytes.

        ``wait=False`` (a signal handler): skip if a write is under way instead of waiting.
        """
        if not self._lock.acquire(blocking=wait):
            return 0
        try:
            if self._count == 0 or (old_only and not self._old()):
                return 0
            return self._write()
        finally:
            self._lock.release()

    def flush_due(self) -> int:
        """Write the kept steps if the batch is due (:data:`MAX_AGE`); return bytes."""
        return self.flush(old_only=True)

    def _old(self) -> bool:
        return time.monotonic() - self._written_at >= MAX_AGE

    def _write(self) -> int:
        n, k = self._count, self._sums.shape[1]
        rows, _ = merge(self._sums[:n].reshape(n * k, HIST),
                        self._maxes[:n].reshape(n * k, MAX_WIDTH), None, histograms=False)
        self._count = 0
        self._written_at = time.monotonic()
        return self._writer.append_steps(self._steps[:n].copy(), rows.reshape(n, k, -1),
                                         self._hists[:n])  # fmt: skip
