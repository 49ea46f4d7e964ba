"""Example tests: make the repository root importable, as it is for ``beam-agents-replay``.

``examples`` is not an installed package; the demo and the replay CLI import it
from the repository root (the current directory), so these tests do the same
whatever directory pytest was started from.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
