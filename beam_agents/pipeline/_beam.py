"""Apache Beam as this package uses it, typed ``Any`` at this one boundary.

Beam ships partial annotations: ``ParDo``, ``Flatten``, ``DoFn.__init__``, the
state specs and metric counters are untyped, so strict mypy would flag nearly
every call. Instead of silencing each call site, the pipeline modules take Beam
from here, where the boundary is explicit; ``PCollection`` and ``PTransform``
(properly generic) are imported from Beam directly where they annotate our API.

Only ``beam_agents.pipeline`` imports Apache Beam (docs/index.md, "How the code is laid out", rule 2).
"""

from __future__ import annotations

from typing import Any

import apache_beam as _apache_beam
from apache_beam import coders as _coders
from apache_beam.metrics import metric as _metrics
from apache_beam.transforms import timeutil as _timeutil
from apache_beam.transforms import userstate as _userstate
from apache_beam.transforms import window as _window
from apache_beam.utils import timestamp as _timestamp
from apache_beam.utils import windowed_value as _windowed_value

beam: Any = _apache_beam
"""The ``apache_beam`` module."""
BytesCoder: Any = _coders.BytesCoder
IterableCoder: Any = _coders.IterableCoder
VarIntCoder: Any = _coders.VarIntCoder
Metrics: Any = _metrics.Metrics
TimeDomain: Any = _timeutil.TimeDomain
ReadModifyWriteStateSpec: Any = _userstate.ReadModifyWriteStateSpec
TimerSpec: Any = _userstate.TimerSpec
on_timer: Any = _userstate.on_timer
GlobalWindows: Any = _window.GlobalWindows
Timestamp: Any = _timestamp.Timestamp
WindowedValue: Any = _windowed_value.WindowedValue
