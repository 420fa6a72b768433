"""How often a compiled model can afford an eager step: within a share of wall time.

A recorded step of a compiled model runs eagerly (:mod:`..runtime.eager_steps`): its forward
and backward take longer than the compiled ones. :class:`EagerPace` estimates that extra time
from the forwards it is told of (the fastest of the last few eager and of the last few
compiled ones, as load only ever adds time; times ``STEP``: a backward costs about twice its
forward; the gap between two calls would count the user's pauses too) and allows the next
eager step only once the time since the last is the extra time over ``budget`` (2%: an eager
step that costs 60 ms more comes at most every 3 s).
A selection change (:meth:`now_due`) allows the next step at once, so the first record of a
new layer comes with the next forward.

>>> now = [0.0]
>>> pace = EagerPace(now=lambda: now[0])
>>> for eager, seconds in [(True, 0.05), (False, 0.02), (False, 0.02)]:
...     pace.took(eager, seconds)
>>> round(pace.extra, 3), round(pace.spacing, 3)
(0.09, 4.5)
>>> pace.allowed()
False
>>> now[0] = 4.5; pace.allowed()
True
>>> pace.now_due(); pace.allowed()
True
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

__all__ = ["EagerPace"]

KEPT = 5  # forwards kept of each kind
STEP = 3.0  # a training step's time over its forward's (forward + a backward of about twice)


class EagerPace:
    """Spaces out eager steps so their extra time stays within ``budget`` of wall time.

    Args:
        budget: the largest share of wall time the eager steps may add.
        now: the clock (``time.perf_counter``).
    """

    def __init__(self, budget: float = 0.02, now: Callable[[], float] = time.perf_counter) -> None:
        self.budget = budget
        self.now = now
        self._took: dict[bool, deque[float]] = {True: deque(maxlen=KEPT), False: deque(maxlen=KEPT)}
        self._last_eager = -1e18

    @property
    def extra(self) -> float:
        """Seconds an eager step takes beyond a compiled one (``0`` until both were seen)."""
        eager, compiled = self._took[True], self._took[False]
        if not eager or not compiled:
            return 0.0
        return max(0.0, min(eager) - min(compiled)) * STEP

    @property
    def spacing(self) -> float:
        """Seconds from one eager step to the next that keep them within the budget."""
        return self.extra / self.budget if self.budget > 0 else 0.0

    def allowed(self) -> bool:
        """May this call run eagerly?"""
        return self.now() - self._last_eager >= self.spacing

    def took(self, eager: bool, seconds: float) -> None:
        """A forward of the model (``eager`` or compiled) just took ``seconds`` (an eager one:
        without its reductions, which the throttle's own budget covers)."""
        self._took[eager].append(seconds)
        if eager:
            self._last_eager = self.now()

    def now_due(self) -> None:
        """Let the next call run eagerly, whatever the spacing (a selection change)."""
        self._last_eager = -1e18
