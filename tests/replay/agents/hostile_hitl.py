"""HITL policies whose module does something at import (for ``bundle --hitl``).

``POLICY_CONNECTS`` tries to connect to $BEAM_AGENTS_TEST_NETWORK_TARGET, then
(if $BEAM_AGENTS_TEST_WRITE_TARGET names a file) to create it through a process
(``touch``), at import, swallowing what is refused, as careless code would.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess

from beam_agents import HitlPolicy

_target = os.environ.get("BEAM_AGENTS_TEST_NETWORK_TARGET", "")
if _target:
    host, _, port = _target.rpartition(":")
    with contextlib.suppress(Exception), socket.create_connection((host, int(port)), timeout=5):
        pass
_touch = os.environ.get("BEAM_AGENTS_TEST_WRITE_TARGET", "")
if _touch:
    with contextlib.suppress(Exception):
        subprocess.run(["touch", _touch], check=False)

POLICY_CONNECTS = HitlPolicy()
