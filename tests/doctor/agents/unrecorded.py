"""A read-only tool that asks an HTTP service, declared as a plain @tool (not recorded)."""

from __future__ import annotations

import json
import os
import urllib.request

from beam_agents import Agent, Done, ToolRegistry, tool
from tests.doctor.agents.common import ask

SERVICE = os.environ.get("DOCTOR_CORPUS_SERVICE", "http://127.0.0.1:9")


@tool
def order_status(order_id: str) -> dict:
    with urllib.request.urlopen(f"{SERVICE}/orders/{order_id}", timeout=10) as reply:  # doctor: unrecorded-tool
        return json.loads(reply.read())


class StatusAgent(Agent):
    def start(self, ctx, event):
        status = ctx.call("order_status", order_id=event.payload.decode())
        answer = ctx.complete(ask(f"status: {status['status']}"))
        return Done(output=answer.text.encode())


AGENT = StatusAgent()
TOOLS = ToolRegistry([order_status])
