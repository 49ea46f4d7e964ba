"""The snapshot: read, parsed, version-checked and migrated in memory (never written back).

Every failure is an ``InputError`` (exit 2: unreadable, not a snapshot, a corrupt
blob, newer than this package) or a ``CannotReproduce`` (exit 3: a blob with no
migration path), naming the snapshot as the caller's ``Naming`` names it.
"""

from __future__ import annotations

from collections.abc import Callable

from beam_agents._protos import StateSnapshot
from beam_agents.errors import (
    BlobTooNewError,
    CorruptBlobError,
    MigrationGapError,
    StateError,
)
from beam_agents.key_state import KeyState, load_snapshot_for_replay
from beam_agents.key_state import load_snapshot_message as load_snapshot_message_state
from beam_agents.replay.inputs.sources import describe_source, read_source_mutable
from beam_agents.replay.naming import REPLAYER, Input, Naming
from beam_agents.replay.options import Source
from beam_agents.replay.refusal import CannotReproduce, InputError

__all__ = ["LoadedSnapshot", "load_snapshot_message", "load_snapshot_source"]

LoadedSnapshot = tuple[StateSnapshot, KeyState, dict[str, int]]
"""``(snapshot, key state at the current layouts, stored version of each blob)``."""


def load_snapshot_source(source: Source, naming: Naming = REPLAYER) -> LoadedSnapshot:
    """Read, parse, version-check and migrate (in memory) the snapshot file (or bytes).

    Raises:
        InputError: Unreadable, not a snapshot, a corrupt blob, or newer than this package.
        CannotReproduce: A blob has no migration path to the current version.
    """
    given = naming.given(Input.SNAPSHOT, describe_source(source))
    # A bytearray, which the loader empties once it has copied the cache bodies out:
    # the file's bytes are not held alongside the parsed cache (issue 14: memory).
    data = read_source_mutable(source, Input.SNAPSHOT, naming)
    # The snapshot comes without its two cache blobs: the state holds them parsed, and
    # nothing reads the stored bytes again (issue 14: memory ~ the snapshot's size).
    return _checked(given, lambda: load_snapshot_for_replay(data))


def load_snapshot_message(snapshot: StateSnapshot, naming: Naming = REPLAYER) -> LoadedSnapshot:
    """``load_snapshot_source`` of a parsed snapshot (``Replayer``'s): its blobs
    version-checked and migrated in memory, the message itself only read, never
    serialized to be parsed again.

    Raises:
        As ``load_snapshot_source``.
    """
    given = naming.given(Input.SNAPSHOT, f"<{snapshot.ByteSize()} bytes>")

    def load() -> LoadedSnapshot:
        state, versions = load_snapshot_message_state(snapshot)
        return snapshot, state, versions

    return _checked(given, load)


def _checked(given: str, load: Callable[[], LoadedSnapshot]) -> LoadedSnapshot:
    """``load()``, its errors refused naming the snapshot as ``given``."""
    try:
        snapshot, state, versions = load()
        state.tool_cache.check_keys()
    except BlobTooNewError as exc:
        raise InputError(f"{given}: {exc}") from None
    except MigrationGapError as exc:
        raise CannotReproduce(
            f"{given}: migration gap: {exc}",
            "replay migrates old blobs with the same migrations the pipeline uses, and this "
            "version has none for that step",
        ) from None
    except CorruptBlobError as exc:
        what = (
            "is not a serialized StateSnapshot"
            if exc.kind == "snapshot"
            else f"holds a corrupt {exc.kind} blob"
        )
        raise InputError(
            f"{given} {what}: {exc.detail}",
            "pass the snapshot sink's message value (one StateSnapshot), byte for byte",
        ) from None
    except StateError as exc:
        raise InputError(f"{given} cannot be used: {exc}") from None
    return snapshot, state, versions
