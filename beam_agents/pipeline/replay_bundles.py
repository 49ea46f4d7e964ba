"""``ReplayBundles``: ``beam-agents-replay check`` as a Beam pipeline, for folders too big for one machine.

Bundles in, one result row per activation out, and the rows counted by
verdict and cause as a second output::

    rows = (
        p
        | ReadBundleFiles("gs://incidents/*.bundle")   # or any PCollection of (name, bytes)
        | ReplayBundles()
    )
    rows.results   # dicts, one per activation (the fields of `check --json` rows)
    rows.counts    # ((verdict, cause), count)

Each activation is replayed by the same ``beam_agents.replay.incidents.check.check_one``
path as ``check``: ``engine.replay`` over ``bundle_options``, under the replay
network guard, in the worker's process. The bundles are split into their
activations and reshuffled first, so one bundle with many activations spreads
over workers. A file that is not a readable, consistent bundle is one
``error`` row, never a failed pipeline. Nothing here is runner-specific: the
same transform runs on the FnApiRunner (also multi-process), Dataflow, Flink.
An activation whose agent code runs past ``time_limit`` (default 60 s, as the
CLI's ``--time-limit``; 0 or None: none) is an irreproducible row naming the
limit, as in ``check``. Its thread cannot be stopped, and nothing ends the
runner's worker process for it (the runner would retry the work): it keeps the
guard in force in that worker until it ends (docs/incidents.md §5). Hanging
agent code belongs in ``check``, whose workers are replaced.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

from apache_beam.pvalue import PCollection

from beam_agents.pipeline._beam import beam
from beam_agents.replay.naming import REPLAY_BUNDLES
from beam_agents.replay.options import DEFAULT_TIME_LIMIT, checked_time_limit

__all__ = ["ReadBundleFiles", "ReplayBundles", "ReplayBundlesOutputs"]

_TAG_ROWS = "rows"


def _named(element: Any) -> tuple[str, bytes]:
    if isinstance(element, bytes):
        return f"bundle-{hashlib.sha256(element).hexdigest()[:16]}", element
    name, data = element
    return str(name), bytes(data)


class _SplitBundles(beam.DoFn):  # type: ignore[misc]
    """``(name, bytes)`` -> ``(name, bytes, seq)`` per activation; unreadable ones, and those
    whose recorded code the caller did not consent to import -> a row."""

    def __init__(self, agent: str | None, registry: str | None, import_recorded: bool) -> None:
        self._agent = agent
        self._registry = registry
        self._import_recorded = import_recorded

    def process(self, element: Any) -> Iterator[Any]:
        from beam_agents.replay.incidents.bundle import check_consent, load_bundle
        from beam_agents.replay.incidents.check_rows import refused_row
        from beam_agents.replay.refusal import ReplayRefused

        name, data = _named(element)
        started = time.perf_counter()
        try:
            bundle = load_bundle(data, name=name, naming=REPLAY_BUNDLES)
            check_consent(
                bundle,
                agent=self._agent,
                registry=self._registry,
                import_recorded=self._import_recorded,
                naming=REPLAY_BUNDLES,
            )
        except ReplayRefused as refused:
            row = refused_row(name, refused, time.perf_counter() - started)
            yield beam.pvalue.TaggedOutput(_TAG_ROWS, row.document())
            return
        for seq in bundle.seqs:
            yield (name, data, seq)


class _ReplayActivation(beam.DoFn):  # type: ignore[misc]
    """``(name, bytes, seq)`` -> its result row (``engine.replay`` in this worker)."""

    def __init__(
        self,
        agent: str | None,
        registry: str | None,
        time_limit: float | None,
        import_recorded: bool,
    ) -> None:
        self._agent = agent
        self._registry = registry
        self._time_limit = time_limit
        self._import_recorded = import_recorded

    def process(self, element: tuple[str, bytes, int]) -> Iterator[dict[str, Any]]:
        from dataclasses import replace as with_changes

        from beam_agents.replay.engine import replay
        from beam_agents.replay.incidents.bundle import bundle_options, load_bundle
        from beam_agents.replay.incidents.check_rows import result_row
        from beam_agents.replay.inputs.agent_code import ancestors

        name, data, seq = element
        started = time.perf_counter()
        bundle = load_bundle(data, name=name, naming=REPLAY_BUNDLES)
        # replay() itself writes no bytecode while it imports and runs agent code.
        options = bundle_options(
            bundle,
            seq=seq,
            agent=self._agent,
            registry=self._registry,
            import_recorded=self._import_recorded,
            naming=REPLAY_BUNDLES,
        )
        if os.path.isfile(name):  # a local file: its recorded code is looked for beside it too
            options = with_changes(options, code_search=ancestors(name))
        result = replay(with_changes(options, time_limit=self._time_limit))
        seconds = time.perf_counter() - started
        yield result_row(
            name, seq, bundle.entity_key, result, seconds, time_limit=self._time_limit
        ).document()


def _count_key(row: dict[str, Any]) -> tuple[tuple[str, str], int]:
    return (row["verdict"], row["cause"]), 1


class ReplayBundlesOutputs(NamedTuple):
    """What ``ReplayBundles`` returns."""

    results: PCollection[dict[str, Any]]
    """One row per activation (also one per unreadable bundle): path, seq, entity_key (hex),
    verdict, exit_code, cause_kind, cause, detail, seconds — a row of ``check --json``
    (``CheckRow.document``)."""
    counts: PCollection[tuple[tuple[str, str], int]]
    """``((verdict, cause), number of rows)``: the groups of ``check``'s table."""


class ReplayBundles(beam.PTransform):  # type: ignore[misc]
    """Replay every activation of every incident bundle; see the module docstring.

    Input: a ``PCollection`` of ``(name, bundle bytes)`` (``ReadBundleFiles`` makes one)
    or of bundle bytes alone (named by their digest).
    """

    def __init__(
        self,
        *,
        agent: str | None = None,
        registry: str | None = None,
        import_recorded: bool = False,
        time_limit: float | None = DEFAULT_TIME_LIMIT,
    ) -> None:
        """Args:
        agent: Replay with this agent (``module:ATTR``) instead of each bundle's own.
        registry: Likewise for the tool registry.
        import_recorded: Consent to import the agent and registry each bundle records
            (where ``agent``/``registry`` is None; importing runs that code). Without it
            such a bundle is one ``error`` row naming the code, and nothing is imported.
        time_limit: Seconds each activation's agent code may run (importing it, then the
            re-run, each on its own), as ``check --time-limit``; past it the row is
            irreproducible, naming the limit. None or 0: no limit. At most 86400.

        Raises:
            ValueError: a bad ``agent``/``registry`` path or ``time_limit``, named.
        """
        super().__init__()
        for flag, value in (("agent", agent), ("registry", registry)):
            if value is not None and ":" not in value:
                raise ValueError(f"ReplayBundles({flag}={value!r}): expected module:ATTR")
        try:
            self.time_limit = checked_time_limit(time_limit)
        except ValueError as exc:
            raise ValueError(f"ReplayBundles(time_limit=...) {exc}") from None
        self._agent = agent
        self._registry = registry
        self._import_recorded = import_recorded

    def expand(self, bundles: PCollection[Any]) -> ReplayBundlesOutputs:
        split = bundles | "SplitIntoActivations" >> beam.ParDo(
            _SplitBundles(self._agent, self._registry, self._import_recorded)
        ).with_outputs(
            _TAG_ROWS, main="activations"
        )
        replayed = (
            split.activations
            | "Spread" >> beam.Reshuffle()
            | "Replay"
            >> beam.ParDo(
                _ReplayActivation(
                    self._agent, self._registry, self.time_limit, self._import_recorded
                )
            )
        )
        results = (replayed, split[_TAG_ROWS]) | "Results" >> beam.Flatten()
        counts = (
            results
            | "ByVerdictAndCause" >> beam.Map(_count_key)
            | "Count" >> beam.CombinePerKey(sum)
        )
        return ReplayBundlesOutputs(results=results, counts=counts)


class ReadBundleFiles(beam.PTransform):  # type: ignore[misc]
    """``(path, bytes)`` of every file matching a pattern (any filesystem Beam knows)."""

    def __init__(self, pattern: str) -> None:
        super().__init__()
        self._pattern = pattern

    def expand(self, pbegin: Any) -> PCollection[tuple[str, bytes]]:
        import importlib

        fileio: Any = importlib.import_module("apache_beam.io.fileio")
        result: PCollection[tuple[str, bytes]] = (
            pbegin
            | "Match" >> fileio.MatchFiles(self._pattern)
            | "Open" >> fileio.ReadMatches()
            | "Read" >> beam.Map(lambda f: (f.metadata.path, f.read()))
        )
        return result
