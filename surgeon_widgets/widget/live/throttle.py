"""When a live update is due: at most ``max_rate`` a second per key, within a time budget.

A key is ``(name, kind)``, e.g. ``("fc", "activation")``. An update is due at most ``max_rate``
times a second, and no more often than keeps the time spent reducing under ``budget`` (2%) of
wall time (shared by every key), so big tensors on a slow device update less often instead of
slowing training down. Each key still updates at least once a second (``MAX_WAIT``), unless one
update of every key takes longer than ``budget`` of that second: then each waits at most that
total over ``budget`` (12 layers of 2M values on a CPU: about 2.5 s). ``max_rate=0``: always due.
A key's cost is the median of its last ``COSTS`` updates: one update slowed down by something
else (a descheduled thread, a garbage collection) does not hold the key, or every key, back.
Updates happen only when a hook fires (once a step), so one comes up to a step past its
spacing; the next is due that much sooner (unless it came over half a spacing late: a pause):
on average keys are spaced as the budget allows, not half a step more.

>>> now = [0.0]
>>> throttle = Throttle(max_rate=10, now=lambda: now[0])
>>> throttle.due(("fc", "activation")), throttle.due(("fc", "activation"))
(True, False)
>>> now[0] = 0.1; throttle.due(("fc", "activation"))
True
>>> throttle.note_cost(("fc", "activation"), 0.01)  # 10 ms over a 2% budget: 0.5 s apart
>>> throttle.spacing(("fc", "activation"), keys=1)
0.5
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from collections.abc import Callable

__all__ = ["COSTS", "MAX_WAIT", "Key", "Throttle"]

MAX_WAIT = 1.0  # seconds: the longest the time budget holds an update back, while affordable
COSTS = 5  # a key's cost is the median of its last this many updates
Key = tuple[str, str]


class Throttle:
    """Decides when an update of a key is due; ``note_cost`` tells it what one update took.

    Args:
        max_rate: most updates a second per key; ``0`` means every call.
        budget: with ``max_rate > 0``, the largest share of wall time spent on reductions.
        now: the clock (``time.monotonic``); ``bench_live`` gives each of its arms one that
            counts only that arm's steps.
    """

    def __init__(
        self,
        max_rate: float = 10.0,
        budget: float = 0.02,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_rate = max_rate
        self.budget = budget
        self.now = now
        self.keys = 1  # keys updated in a round (the selection's), see spacing
        self._last: dict[Key, float] = {}
        self._took: dict[Key, deque[float]] = {}  # seconds of each key's last COSTS updates
        self._cost: dict[Key, float] = {}  # their median
        self._late: dict[Key, float] = {}  # seconds past its spacing, carried to the next one
        self.spent = 0.0  # seconds of every update noted so far

    @property
    def costs(self) -> dict[Key, float]:
        """Seconds an update of each key takes: the median of its last ``COSTS`` (a copy)."""
        return dict(self._cost)

    def due(self, key: Key) -> bool:
        """Is an update of ``key`` due now? (If so, it counts as made now.)"""
        if not self.ready(key):
            return False
        if self.max_rate > 0:
            now = self.now()
            if key in self._last:  # how much later than its spacing this update came
                spacing = self.spacing(key)
                late = self._late.get(key, 0.0) + now - self._last[key] - spacing
                # later than half a spacing is a pause (no forwards), not a step's rounding
                self._late[key] = late if 0.0 < late <= spacing / 2 else 0.0
            self._last[key] = now
        return True

    def ready(self, key: Key) -> bool:
        """Would an update of ``key`` be due now? (Unlike :meth:`due`, nothing counts as made.)"""
        if self.max_rate <= 0:
            return True
        elapsed = self.now() - self._last.get(key, -1e9)
        # due once the spacing is reached, less what earlier updates came late: updates come
        # only at a forward, so each would otherwise wait the rest of a step beyond its spacing
        spaced = self.spacing(key) - self._late.get(key, 0.0)
        return elapsed >= 1.0 / self.max_rate and elapsed >= spaced

    def seen(self, wanted: Callable[[Key], bool]) -> list[Key]:
        """The keys among those updated so far for which ``wanted(key)`` holds."""
        return [k for k in self._last if wanted(k)]

    def note_cost(self, key: Key, seconds: float) -> None:
        """Record how long an update of ``key`` took (spaces out its next ones, see ``due``)."""
        took = self._took.setdefault(key, deque(maxlen=COSTS))
        took.append(seconds)
        self._cost[key] = statistics.median(took)
        self.spent += seconds

    def keep(self, wanted: Callable[[Key], bool]) -> None:
        """Forget the costs of keys no longer updated: they would hold the others back."""
        self._cost = {k: c for k, c in self._cost.items() if wanted(k)}
        self._took = {k: t for k, t in self._took.items() if wanted(k)}
        self._late = {k: t for k, t in self._late.items() if wanted(k)}

    def spacing(self, key: Key, keys: int | None = None) -> float:
        """Seconds between two updates of ``key`` that keep reductions within the budget.

        ``keys``: how many keys share the budget (default: ``self.keys``).
        """
        shared = self.keys if keys is None else keys
        spaced = self._cost.get(key, 0.0) * shared / self.budget
        # MAX_WAIT keeps every view live, but not at any price: a round of every key's update
        # may take at most ``budget`` of the longest wait
        longest = max(MAX_WAIT, sum(self._cost.values()) / self.budget)
        return min(spaced, longest)
