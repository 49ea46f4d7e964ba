"""Maps an anonymous shared page at import; an activation outputs whether one wrote it."""

from __future__ import annotations

import mmap

from forked_import import OutputOnce

PAGE = mmap.mmap(-1, mmap.PAGESIZE)  # MAP_SHARED | MAP_ANONYMOUS


class SharedPage(OutputOnce):
    def seen(self) -> bytes:
        primed = PAGE[0]
        PAGE[0] = 1
        return b"primed" if primed else b"first"


AGENT = SharedPage()
