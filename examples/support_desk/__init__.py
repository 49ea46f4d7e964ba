"""The support-desk example: an order-support agent, its tools, a scripted model, a bundled stream.

Modules, one concept each:

- ``orders``: the small order table the read-only tool looks orders up in.
- ``tools``: ``lookup_order`` (read-only) and ``issue_refund`` (side effect, needs approval).
- ``model``: the scripted provider standing in for the model (deterministic, offline).
- ``agent``: ``SupportAgent`` v1 (what "ran in production"): ``AGENT`` and ``TOOLS``.
- ``agent_v2``: v2, with a plausible change on the non-model path (order id normalization).
- ``agent_v3``: v3, with two changes that break replay (the wall clock, module state), for
  the determinism doctor to name.
- ``stream``: the bundled stream of envelopes for four customers, and the incidents in it.

Import paths for ``beam-agents-replay``: ``examples.support_desk.agent:AGENT``,
``examples.support_desk.agent:TOOLS``, ``examples.support_desk.agent_v2:AGENT``,
``examples.support_desk.agent_v3:AGENT``.
"""
