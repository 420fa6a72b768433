"""Record a training job's layer statistics on every rank, merged, into a run folder; read it back.

``Recorder`` (:mod:`.recorder`) hooks the layers and merges in ``step()``; ``read_run``
(:mod:`.reader`) reads the folder, also while it is written. Imports the engine, never the widget.
"""

from .collect import RankMismatchError
from .reader import Run, RunStats, read_run
from .recorder import Recorder, RecorderCost

__all__ = ["RankMismatchError", "Recorder", "RecorderCost", "Run", "RunStats", "read_run"]
