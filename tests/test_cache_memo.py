"""CacheMemo: cache cells remembered by their exact bytes load to what parsing them gives.

The step (KeyStep, so AgentDoFn and PipelineKey) loads every key's caches through one;
these tests check that a history run through it emits the same bytes and commits the
same cells as one that parses every cell, also when the store is rolled back as a
retried bundle's is, and that nothing is served for bytes the memo was not given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from beam_agents import Agent, Done, ToolRegistry, tool
from beam_agents._protos import AgentEnvelope, Event
from beam_agents.blobs import LARGE_CELL_BYTES, load_llm_cache
from beam_agents.cache_memo import CacheMemo
from beam_agents.context import AgentContext
from beam_agents.key_state import StateCells, load_key_state
from beam_agents.key_step import KeyStep, MemoryKeyStore, StepResult, activation_runner
from beam_agents.llm_cache import CachePolicy
from beam_agents.testing import ScriptedProvider, chat_request, event_envelope

T0 = 1_734_000_000_000
GOLDEN = Path(__file__).resolve().parent / "fixtures" / "blobs"


@tool(name="read_order", recorded=True)
def read_order(order_id: str) -> dict[str, Any]:
    return {"order_id": order_id, "status": "in_transit"}


class AskingAgent(Agent):
    """A fixed question (a hit after the first), one of three others (inserts and, with a
    two-entry cache, evictions), a recorded tool call (the tool cache) and a memory turn."""

    def start(self, ctx: AgentContext, event: Event) -> Done:
        fixed = ctx.complete(chat_request("m", ("user", "Status?")))
        varying = ctx.complete(chat_request("m", ("user", f"Topic {ctx.seq % 3}?")))
        order = ctx.call("read_order", order_id=event.type)
        ctx.memory[f"turn.{ctx.seq}"] = varying.text
        return Done(output=f"{fixed.text}/{varying.text}/{order['status']}".encode())


def step(memo: CacheMemo | None = None) -> KeyStep:
    provider = ScriptedProvider(lambda request: f"answer {request.messages[-1].content}")
    built = KeyStep(
        activation_runner(
            AskingAgent(),
            ToolRegistry([read_order]),
            provider,
            cache_policy=CachePolicy(max_entries=2),
        ),
        inbox_limit=8,
    )
    if memo is not None:
        built._memo = memo
    return built


def envelope(seq: int, key: bytes = b"k") -> bytes:
    return event_envelope(
        key, f"A-{seq % 2}", time_ms=T0 + seq, envelope_id=f"e{seq}"
    ).SerializeToString()


def emitted(result: StepResult) -> list[tuple[str, Any]]:
    return [(str(tag), value) for tag, value in result.emitted]


def copied(store: MemoryKeyStore) -> MemoryKeyStore:
    return MemoryKeyStore(store.seq, store.cells, list(store.inbox), store.hold)


def test_a_history_through_the_memo_emits_and_commits_what_parsing_every_cell_does() -> None:
    remembering, parsing = step(), step(CacheMemo(budget_bytes=0))
    left, right = MemoryKeyStore(), MemoryKeyStore()

    for seq in range(12):
        assert emitted(remembering.envelope(b"k", envelope(seq), left)) == emitted(
            parsing.envelope(b"k", envelope(seq), right)
        )
        assert (left.seq, left.cells) == (right.seq, right.cells)
    assert len(remembering._memo) > 0 and len(parsing._memo) == 0
    assert left.cells.tool_cache and left.cells.llm_cache


def test_a_rolled_back_store_loads_what_it_holds_not_the_failed_attempts_commit() -> None:
    # A retried bundle: the runner hands back the cells from before it, after the memo
    # saw the attempt's commit. The retry must give the very bytes of the first attempt.
    remembering, reference = step(), step(CacheMemo(budget_bytes=0))
    store, mirror = MemoryKeyStore(), MemoryKeyStore()
    for seq in range(4):
        remembering.envelope(b"k", envelope(seq), store)
        reference.envelope(b"k", envelope(seq), mirror)
    before = copied(store)

    first = emitted(remembering.envelope(b"k", envelope(4), store))
    committed = (store.seq, store.cells)
    retried = emitted(remembering.envelope(b"k", envelope(4), before))

    assert retried == first == emitted(reference.envelope(b"k", envelope(4), mirror))
    assert (before.seq, before.cells) == committed == (mirror.seq, mirror.cells)


def test_a_remembered_cache_is_handed_out_as_a_copy() -> None:
    memo = CacheMemo()
    store = MemoryKeyStore()
    step(memo).envelope(b"k", envelope(0), store)
    raw = store.cells.llm_cache

    handed = load_key_state(store.cells, memo).cache
    handed.lookup(next(iter(handed.to_body().entries)).cache_key, now_ms=T0 + 99)
    again = load_key_state(store.cells, memo).cache

    assert again.body_bytes() == load_llm_cache(raw)[0].body_bytes()
    assert handed.body_bytes() != again.body_bytes()


def test_only_the_bytes_given_are_served_and_each_load_of_other_bytes_parses() -> None:
    parsed: list[bytes] = []

    def counting(raw: bytes) -> Any:
        parsed.append(raw)
        return load_llm_cache(raw)

    store = MemoryKeyStore()
    step().envelope(b"k", envelope(0), store)
    one = store.cells.llm_cache
    step().envelope(b"k", envelope(1), store)
    two = store.cells.llm_cache
    memo = CacheMemo()

    memo.load("llm_cache", one, counting)
    memo.load("llm_cache", one, counting)
    memo.load("llm_cache", two, counting)
    memo.load("tool_cache", two, counting)  # another kind, the same bytes: its own entry

    assert parsed == [one, two, two]


def test_migrated_oversized_and_empty_cells_are_not_remembered() -> None:
    old = (GOLDEN / "llm_cache-v1.bin").read_bytes()
    memo = CacheMemo()

    first = load_key_state(StateCells(llm_cache=old), memo)
    second = load_key_state(StateCells(llm_cache=old), memo)
    load_key_state(StateCells(), memo)

    # Every load of an old cell reports its migration (a commit rewrites it current).
    assert first.migrations_applied == second.migrations_applied == ["llm_cache v1→v2"]
    assert len(memo) == 0
    memo.remember("llm_cache", b"\x00" * LARGE_CELL_BYTES, first.cache)
    assert len(memo) == 0


def test_the_memo_holds_at_most_its_budget_of_cell_bytes() -> None:
    cells = []
    store = MemoryKeyStore()
    for seq in range(5):
        step().envelope(b"k", envelope(seq), store)
        cells.append(store.cells.llm_cache)
    memo = CacheMemo(budget_bytes=2 * max(len(raw) for raw in cells))

    for raw in cells:
        memo.load("llm_cache", raw, load_llm_cache)

    assert len(memo) == 2


def test_keys_with_equal_cells_share_nothing_they_can_change() -> None:
    remembering = step()
    stores = {key: MemoryKeyStore() for key in (b"a", b"b")}
    for seq in range(3):
        for key, store in stores.items():
            raw = AgentEnvelope.FromString(envelope(seq, key)).SerializeToString()
            remembering.envelope(key, raw, store)
    reference = step(CacheMemo(budget_bytes=0))
    for key in stores:
        mirror = MemoryKeyStore()
        for seq in range(3):
            reference.envelope(key, envelope(seq, key), mirror)
        assert mirror.cells == stores[key].cells
