"""The public surface of beam_agents changes only on purpose (DESIGN §9)."""

from __future__ import annotations

import subprocess
import sys

import beam_agents

DESIGN_SECTION_9 = [
    "Agent",
    "AgentConfig",
    "BeamAgentsError",
    "Done",
    "HitlPolicy",
    "RunAgent",
    "RunAgentOutputs",
    "Suspend",
    "ToolRegistry",
    "compute_cache_key",
    "read_trace_stream",
    "serialize_trace_event",
    "tool",
    "write_trace_stream",
]
AGENT_AUTHORS = [
    # Issue 15: what agent code and its tests touch, so they never import internals.
    "AgentContext",  # the type of ctx
    "Event",  # what start() receives
    "ToolResult",  # what resume() receives ...
    "Approval",
    "Timeout",
    "Inbound",  # ToolResult | Approval | Timeout
    "Outcome",  # Done | Suspend
    "LlmRequest",  # ctx.complete's request and response, and their parts
    "LlmResponse",
    "ChatMessage",
    "ToolCall",
    "ToolSpec",
    "SamplingParams",
    "derive_intent_id",  # the id of an intent (tests build tool_result/approval envelopes)
]
PIPELINE_AUTHORS = [
    # Issue 24: AgentConfig(retry=RetryPolicy(...)), beside HitlPolicy.
    "RetryPolicy",
]


def test_all_is_exactly_the_designs_list_and_the_agent_authors() -> None:
    assert sorted(beam_agents.__all__) == sorted(DESIGN_SECTION_9 + AGENT_AUTHORS + PIPELINE_AUTHORS)


def test_every_exported_name_resolves() -> None:
    for name in beam_agents.__all__:
        assert getattr(beam_agents, name) is not None, name


def test_exception_tree_has_one_root() -> None:
    from beam_agents import errors

    classes = [
        obj for obj in vars(errors).values() if isinstance(obj, type) and issubclass(obj, Exception)
    ]
    assert all(issubclass(cls, beam_agents.BeamAgentsError) for cls in classes)


def test_importing_the_package_does_not_import_beam() -> None:
    """RunAgent is loaded lazily so `import beam_agents` (and replay) stay Beam-free."""
    code = "import sys, beam_agents; print('apache_beam' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


class _Shown:
    """An annotation that prints as the source text it was written as."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _signature_line(name: str, obj: object) -> str:
    import inspect

    sig = inspect.signature(obj)  # type: ignore[arg-type]
    params = [
        p.replace(annotation=_Shown(p.annotation)) if isinstance(p.annotation, str) else p
        for p in sig.parameters.values()
    ]
    ret = sig.return_annotation
    if isinstance(obj, type):
        ret = inspect.Signature.empty
    elif isinstance(ret, str):
        ret = _Shown(ret)
    return name + str(sig.replace(parameters=params, return_annotation=ret))


def test_the_testing_helpers_are_documented_with_their_signatures() -> None:
    from pathlib import Path

    from beam_agents import testing

    doc = (Path(__file__).resolve().parent.parent / "docs" / "agent-api.md").read_text()
    own = [n for n in testing.__all__ if getattr(testing, n).__module__ == testing.__name__]
    assert {"ScriptedProvider", "event_envelope", "fixture_registry"} <= set(own)
    for name in own:
        line = _signature_line(name, getattr(testing, name))
        assert f"```text\n{line}\n```" in doc, f"docs/agent-api.md lacks or misstates: {line}"
