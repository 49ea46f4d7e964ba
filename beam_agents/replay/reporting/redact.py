"""``--redact``: a ``ReplayResult`` with every value replaced by its digest.

For environments where plaintext must not reach a log. What a trace already
carries (kinds, names, ids, digests, cache keys, counts, error types) stays;
what only the re-run and the snapshot know (every decoded value, output bytes,
memory, intent arguments, the continuation's state, the exception message,
the DeepDiff detail, which quotes values) becomes a digest or goes, and so does
every plaintext a message quotes (``ReplayResult.redacted_reason``, ``redacted_error``,
``redacted_network_attempts``: a command line or a file path the guard refused, the
text of an exit or of an exception agent code raised). The verdict and every mark
are untouched: redaction changes what is shown, never what was found.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, overload

from beam_agents import canonical_json
from beam_agents.replay.result import (
    BlobDigest,
    ContinuationView,
    Divergence,
    ForkRun,
    MemoryWritesDigest,
    PendingIntentView,
    ReferenceRun,
    ReplayResult,
    StateView,
    Value,
    ValueList,
    WriteSet,
    event_values,
    text_digest,
)

__all__ = ["REDACTED", "redact"]

REDACTED = "(redacted)"


def _digest_of(value: Any) -> str:
    try:
        data = canonical_json.dumps(value)
    except (TypeError, ValueError):
        data = repr(value).encode("utf-8", errors="backslashreplace")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _value(v: Value) -> Value:
    shown = f"sha256:{v.digest}" if v.digest else _digest_of(v.value)
    return replace(v, value=None, text=shown)


class _RedactedValues(ValueList):
    """``values`` redacted one by one as they are read (the values stay derived on demand)."""

    __slots__ = ("_values",)

    def __init__(self, values: Sequence[Value]) -> None:
        self._values = values

    def for_event(self, index: int) -> tuple[Value, ...]:
        return tuple(_value(v) for v in event_values(self._values, index))

    def __iter__(self) -> Iterator[Value]:
        return (_value(v) for v in self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __bool__(self) -> bool:
        return bool(self._values)

    @overload
    def __getitem__(self, i: int) -> Value: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Value, ...]: ...

    def __getitem__(self, i: int | slice) -> Value | tuple[Value, ...]:
        if isinstance(i, slice):
            return tuple(_value(v) for v in self._values[i])
        return _value(self._values[i])


def _blob(b: BlobDigest | None) -> BlobDigest | None:
    return None if b is None else replace(b, payload=b"")


def _continuation(c: ContinuationView | None) -> ContinuationView | None:
    return None if c is None else replace(c, adapter_state=_digest_of(c.adapter_state))


def _pending(p: PendingIntentView) -> PendingIntentView:
    return replace(p, args=_digest_of(p.args))


def _state(s: StateView | None) -> StateView | None:
    if s is None:
        return None
    return replace(
        s,
        memory={REDACTED: _digest_of(s.memory)},
        pending=tuple(_pending(p) for p in s.pending),
        continuation=_continuation(s.continuation),
        resumed_continuation=_continuation(s.resumed_continuation),
    )


def _divergence(d: Divergence | None) -> Divergence | None:
    if d is None or not d.detail:
        return d
    return replace(d, detail=_withheld("the detail"))


def _withheld(what: str) -> str:
    """What stands for a text that quotes values (the headless report prints it as is)."""
    return f"{REDACTED}: {what} quotes values; run without --redact"


def _write_set(w: WriteSet | None) -> WriteSet | None:
    return None if w is None else replace(w, set={k: _digest_of(v) for k, v in w.set.items()})


def _memory_writes(m: MemoryWritesDigest | None) -> MemoryWritesDigest | None:
    if m is None:
        return None
    replayed = _write_set(m.replayed)
    assert replayed is not None
    return replace(
        m,
        replayed=replayed,
        production=_write_set(m.production),
        differences=(_withheld("the list of differences"),)
        if m.differences
        else (),
    )


def _reference(r: ReferenceRun | None) -> ReferenceRun | None:
    """A reference run's production values become their digests too."""
    if r is None:
        return None
    return replace(r, values={key: _value(v) for key, v in r.values.items()})


def _fork(f: ForkRun | None) -> ForkRun | None:
    """A fork's value (the operator's, but a value all the same) becomes its digest."""
    return None if f is None else replace(f, value=text_digest(f.value))


def redact(result: ReplayResult) -> ReplayResult:
    """``result`` with every value replaced by its digest (see the module docstring)."""
    return replace(
        result,
        reason=result.redacted_reason or result.reason,
        error=result.redacted_error or result.error,
        network_attempts=result.redacted_network_attempts or result.network_attempts,
        values=_RedactedValues(result.values),
        outputs=tuple(b for b in (_blob(o) for o in result.outputs) if b is not None),
        memory=_blob(result.memory),
        replayed_memory=None,
        state=_state(result.state),
        first_divergence=_divergence(result.first_divergence),
        reference=_reference(result.reference),
        memory_writes=_memory_writes(result.memory_writes),
        fork=_fork(result.fork),
    )
