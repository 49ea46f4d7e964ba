"""Where traces and snapshots go: ``traces_to`` / ``snapshots_to`` sink URIs and their writers.

``parse_sink_uri`` checks a URI when the configuration is built;
``open_sink`` makes the writer a DoFn owns (created in ``setup``, never
pickled). Importing this package loads no client library: each sink module
imports its own (confluent_kafka, google.cloud.*, grpc/opentelemetry) only
when a sink of its scheme is opened. See docs/sinks.md.
"""

from beam_agents.sinks.base import SinkWriter, open_sink
from beam_agents.sinks.uri import (
    SCHEMES,
    Role,
    SinkUri,
    check_sink_options,
    parse_sink_uri,
    resolve_sink_options,
)

__all__ = [
    "SCHEMES",
    "Role",
    "SinkUri",
    "SinkWriter",
    "check_sink_options",
    "open_sink",
    "parse_sink_uri",
    "resolve_sink_options",
]
