"""Seeds ``random`` at import (as agents do for determinism) and outputs its first draw."""

from __future__ import annotations

import random

from forked_import import OutputOnce

random.seed(1234)


class SeededRandom(OutputOnce):
    def seen(self) -> bytes:
        return repr(random.random()).encode()


AGENT = SeededRandom()
