"""Sink URIs: parsed and checked when the configuration is built, not at the first write.

``AgentConfig`` calls ``parse_sink_uri`` for ``traces_to`` and ``snapshots_to``
so a bad URI is refused at construction, naming it and what to write instead
(docs/sinks.md). Pure Python: no client library is imported here.

Forms (query parameters are sink options, see ``resolve_sink_options`` and docs/sinks.md)::

    kafka://host:port[,host:port...]/topic[?producer.setting=value...]
    pubsub://project/topic
    bigquery://project.dataset.table          traces only
    otlp://[host:port][/path]                 traces only (path: OTLP/HTTP only; no host:
                                              the endpoint from OTEL_EXPORTER_OTLP_*)
    file:///absolute/directory
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from beam_agents.errors import ConfigError

__all__ = [
    "SCHEMES",
    "Role",
    "SinkUri",
    "check_sink_options",
    "is_secret_option",
    "parse_sink_uri",
    "redact_options",
    "redact_uri",
    "resolve_sink_options",
]

Role = Literal["traces", "snapshots"]

SCHEMES: Final = ("kafka", "pubsub", "bigquery", "otlp", "file")

_TRACES_ONLY: Final = {
    # The seed page's reasons, word for word where it states them.
    "bigquery": "a snapshot is an opaque per-key state image with no row layout; "
    "send snapshots to kafka://, pubsub:// or file:// instead",
    "otlp": "otlp:// is a traces-only exporter; "
    "send snapshots to kafka://, pubsub:// or file:// instead",
}

# Options the sinks themselves read; every other key of a kafka:// sink goes to
# the librdkafka Producer as a setting.
_SINK_OPTIONS: Final[dict[str, frozenset[str]]] = {
    "kafka": frozenset({"timeout_s"}),
    "pubsub": frozenset({"timeout_s"}),
    "bigquery": frozenset({"timeout_s", "create_table", "write_mode", "require_partition_filter"}),
    "otlp": frozenset(
        {
            "timeout_s",
            "tls",
            "headers",
            "service_name",
            "protocol",
            "compression",
            "instance_id",
        }
    ),
    "file": frozenset(),
}
_BOOL_OPTIONS: Final = frozenset({"create_table", "tls", "require_partition_filter"})
_CHOICE_OPTIONS: Final = {
    "protocol": ("grpc", "http/protobuf"),
    "compression": ("gzip", "none"),
    "write_mode": ("default", "committed"),
}
# Set by the sink from the URI or owned by it; a setting would silently fight it.
_KAFKA_RESERVED: Final = frozenset(
    {"bootstrap.servers", "metadata.broker.list", "on_delivery", "delivery.report.only.error"}
)
_SECRET_WORDS: Final = (
    "password",
    "passwd",
    "secret",
    "token",
    "credential",
    "headers",
    "sasl.jaas",
    "oauthbearer",
    "apikey",
    "api_key",
    "private",
)
# Option-name segments (split at ``.``, ``_``, ``-``) that mark a secret: ``ssl.key.pem``,
# ``ssl.keystore.location``'s password sits under ``password`` above.
_SECRET_SEGMENTS: Final = frozenset({"key", "pem", "auth", "authorization", "jaas", "keytab"})
_SEGMENT_SPLIT = re.compile(r"[._\-]")

_KAFKA_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PUBSUB_PROJECT = re.compile(r"(?:[a-z0-9.-]+:)?[a-z][a-z0-9-]{4,28}[a-z0-9]")
_PUBSUB_TOPIC = re.compile(r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}")
_BQ_DATASET = re.compile(r"[A-Za-z0-9_]{1,1024}")
_BQ_TABLE = re.compile(r"[\w\- ]{1,1024}")
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]")


@dataclass(frozen=True)
class SinkUri:
    """A parsed, checked sink URI. Only the parts of its scheme are set."""

    scheme: str
    """``kafka``, ``pubsub``, ``bigquery``, ``otlp`` or ``file``."""
    raw: str
    """The URI exactly as configured."""
    hosts: tuple[str, ...] = ()
    """``host:port`` entries: the Kafka bootstrap servers, or the one OTLP endpoint."""
    project: str = ""
    """Pub/Sub or BigQuery project id."""
    topic: str = ""
    """Kafka or Pub/Sub topic."""
    dataset: str = ""
    """BigQuery dataset."""
    table: str = ""
    """BigQuery table."""
    directory: str = ""
    """``file://`` directory, absolute, percent-decoded."""
    path: str = ""
    """``otlp://``: the OTLP/HTTP endpoint's path (``/v1/traces`` when empty)."""
    params: tuple[tuple[str, str], ...] = field(default=())
    """Query parameters, in URI order: sink options that override ``options``."""

    @property
    def options(self) -> dict[str, str]:
        """The query parameters as a dict."""
        return dict(self.params)

    @property
    def redacted(self) -> str:
        """The URI for messages and logs: values of secret-looking parameters shown as ``***``."""
        if not self.params:
            return self.raw
        base = self.raw.split("?", 1)[0]
        shown = [(k, "***" if _is_secret(k) else v) for k, v in self.params]
        return base + "?" + urllib.parse.urlencode(shown, safe=":,/")

    @property
    def table_path(self) -> str:
        """``project.dataset.table`` (BigQuery)."""
        return f"{self.project}.{self.dataset}.{self.table}"

    def __str__(self) -> str:
        return self.redacted


def is_secret_option(key: str) -> bool:
    """Whether an option's value is shown as ``***`` in messages, logs and reprs."""
    lowered = key.lower()
    if any(word in lowered for word in _SECRET_WORDS):
        return True
    return any(segment in _SECRET_SEGMENTS for segment in _SEGMENT_SPLIT.split(lowered))


_is_secret = is_secret_option


def redact_options(options: Mapping[str, object]) -> dict[str, object]:
    """``options`` with the values of secret-looking keys replaced by ``***``."""
    return {k: "***" if is_secret_option(str(k)) else v for k, v in options.items()}


def redact_uri(uri: str) -> str:
    """A sink URI as messages may show it: no user information, no secret query values."""
    return _shown(uri)


def _refuse(uri: str, what: str) -> ConfigError:
    return ConfigError(f"sink URI {_shown(uri)!r} refused: {what}")


_USERINFO = re.compile(r"^(?P<scheme>[^:/?#]*://)(?P<userinfo>[^/?#]*)@")


def _shown(uri: str) -> str:
    # A refused URI may still carry a password, in its user information
    # (kafka://user:pw@host) or its query: never echo either.
    uri = _USERINFO.sub(r"\g<scheme>***@", uri)
    if "?" not in uri:
        return uri
    base, query = uri.split("?", 1)
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    except ValueError:
        return base + "?..."
    return base + "?" + "&".join(f"{k}={'***' if _is_secret(k) else v}" for k, v in pairs)


def _host_ports(uri: str, netloc: str, *, single: bool, form: str) -> tuple[str, ...]:
    if not netloc:
        raise _refuse(uri, f"no host:port; write {form}")
    entries = netloc.split(",")
    if single and len(entries) > 1:
        raise _refuse(uri, f"one endpoint only; write {form}")
    hosts = []
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not _HOST.fullmatch(host):
            raise _refuse(uri, f"{entry!r} is not host:port; write {form}")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise _refuse(uri, f"{entry!r} has no valid port (1-65535); write {form}")
        hosts.append(f"{host}:{int(port)}")
    return tuple(hosts)


def _single_segment(uri: str, path: str, what: str, form: str) -> str:
    segment = path[1:] if path.startswith("/") else path
    if not segment:
        raise _refuse(uri, f"no {what}; write {form}")
    if "/" in segment:
        raise _refuse(uri, f"{segment!r} is not a single {what} name; write {form}")
    return urllib.parse.unquote(segment)


def _params(uri: str, scheme: str, query: str) -> tuple[tuple[str, str], ...]:
    if not query:
        return ()
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise _refuse(uri, "the query is not key=value pairs joined by &") from None
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _refuse(uri, f"option {key!r} is given twice")
        seen.add(key)
    _check_options(dict(pairs), scheme, f"sink URI {_shown(uri)!r}")
    return tuple(pairs)


def _check_options(options: Mapping[str, str], scheme: str, where: str) -> None:
    known = _SINK_OPTIONS[scheme]
    for key, value in options.items():
        if not isinstance(key, str) or not isinstance(value, str):
            shown = "***" if is_secret_option(str(key)) else repr(value)
            raise ConfigError(f"{where}: sink options are strings, got {key!r}={shown}")
        if scheme == "kafka":
            if key in _KAFKA_RESERVED:
                raise ConfigError(
                    f"{where}: option {key!r} is set by the sink itself (the brokers come from "
                    f"the URI's host list); remove it"
                )
        elif key not in known:
            raise ConfigError(
                f"{where}: {scheme}:// has no option {key!r} "
                f"(it takes: {', '.join(sorted(known)) or 'none'})"
            )
        if key == "timeout_s":
            try:
                seconds = float(value)
            except ValueError:
                seconds = -1.0
            if not 0 < seconds <= 3600:
                raise ConfigError(
                    f"{where}: timeout_s={value!r} is not a number of seconds in (0, 3600]"
                )
        if key in _BOOL_OPTIONS and value not in ("true", "false"):
            raise ConfigError(f"{where}: {key}={value!r} must be 'true' or 'false'")
        choices = _CHOICE_OPTIONS.get(key)
        if choices is not None and scheme != "kafka" and value not in choices:
            raise ConfigError(f"{where}: {key}={value!r} must be one of {', '.join(choices)}")


def parse_sink_uri(uri: str, *, role: Role) -> SinkUri:
    """Parse and check a sink URI for ``traces_to`` (role ``"traces"``) or ``snapshots_to``.

    Args:
        uri: The URI as configured.
        role: What the sink will receive.

    Returns:
        The parsed URI.

    Raises:
        ConfigError: An unknown scheme, a malformed URI, an unknown option, or
            a traces-only scheme (``bigquery://``, ``otlp://``) for snapshots;
            the message names the URI and what to write instead.
    """
    if role not in ("traces", "snapshots"):
        raise ConfigError(f"sink role must be 'traces' or 'snapshots', not {role!r}")
    if not isinstance(uri, str) or not uri:
        raise ConfigError(f"a sink URI is a non-empty string, not {uri!r}")
    scheme, sep, _ = uri.partition("://")
    if not sep:
        raise _refuse(uri, f"not a URI (expected scheme://...; schemes: {', '.join(SCHEMES)})")
    if scheme not in SCHEMES:
        raise _refuse(
            uri, f"unknown scheme {scheme + '://'!r}; the sinks are: {', '.join(SCHEMES)}"
        )
    if role == "snapshots" and scheme in _TRACES_ONLY:
        raise ConfigError(f"snapshots_to={_shown(uri)!r} refused: {_TRACES_ONLY[scheme]}")
    try:
        parts = urllib.parse.urlsplit(uri)
    except ValueError as exc:
        raise _refuse(uri, f"malformed: {exc}") from None
    if parts.fragment:
        raise _refuse(uri, "a sink URI has no #fragment")
    if "@" in parts.netloc:
        raise _refuse(
            uri,
            "user information before the host (user:password@) is not supported; pass "
            "credentials as sink options (sink_options=...), not in the URI",
        )
    params = _params(uri, scheme, parts.query)
    netloc, path = parts.netloc, parts.path
    if scheme == "kafka":
        form = "kafka://host:port[,host:port]/topic"
        topic = _single_segment(uri, path, "topic", form)
        if not _KAFKA_TOPIC.fullmatch(topic) or topic in (".", ".."):
            raise _refuse(uri, f"{topic!r} is not a Kafka topic name ([A-Za-z0-9._-], 1-249)")
        hosts = _host_ports(uri, netloc, single=False, form=form)
        return SinkUri(scheme, uri, hosts=hosts, topic=topic, params=params)
    if scheme == "pubsub":
        form = "pubsub://project/topic"
        if not _PUBSUB_PROJECT.fullmatch(netloc):
            raise _refuse(uri, f"{netloc!r} is not a Google Cloud project id; write {form}")
        topic = _single_segment(uri, path, "topic", form)
        if not _PUBSUB_TOPIC.fullmatch(topic) or topic.startswith("goog"):
            raise _refuse(uri, f"{topic!r} is not a Pub/Sub topic id; write {form}")
        return SinkUri(scheme, uri, project=netloc, topic=topic, params=params)
    if scheme == "bigquery":
        form = "bigquery://project.dataset.table"
        if path not in ("", "/"):
            raise _refuse(uri, f"the table goes in the host part, not a path; write {form}")
        project, _, rest = netloc.rpartition(".")
        project, _, dataset = project.rpartition(".")
        table = rest
        if not (project and _BQ_DATASET.fullmatch(dataset) and _BQ_TABLE.fullmatch(table)):
            raise _refuse(uri, f"{netloc!r} is not project.dataset.table; write {form}")
        return SinkUri(scheme, uri, project=project, dataset=dataset, table=table, params=params)
    if scheme == "otlp":
        form = "otlp://host:port[/path] (or otlp:// for the endpoint of OTEL_EXPORTER_OTLP_*)"
        protocol = dict(params).get("protocol")  # checked with the other options
        if not netloc:
            if path not in ("", "/"):
                raise _refuse(uri, f"a path needs a host:port; write {form}")
            return SinkUri(scheme, uri, params=params)
        hosts = _host_ports(uri, netloc, single=True, form=form)
        if path in ("", "/"):
            path = ""
        elif protocol == "grpc":
            raise _refuse(uri, "OTLP/gRPC takes no path; write otlp://host:port")
        return SinkUri(scheme, uri, hosts=hosts, path=path, params=params)
    # file
    if netloc not in ("", "localhost"):
        raise _refuse(
            uri,
            f"file:// takes an absolute directory: write file:///abs/dir (three slashes); "
            f"{netloc!r} reads as a host name",
        )
    directory = urllib.parse.unquote(path)
    if not directory.startswith("/"):
        raise _refuse(uri, "file:// takes an absolute directory: file:///abs/dir")
    if "\x00" in directory:
        raise _refuse(uri, "the directory contains a NUL character")
    if len(directory) > 1:
        directory = directory.rstrip("/")
    return SinkUri(scheme, uri, directory=directory, params=params)


def _takes(scheme: str, key: str) -> bool:
    # A kafka:// sink passes every option it does not know to librdkafka, which
    # checks it when the producer is created.
    return scheme == "kafka" or key in _SINK_OPTIONS[scheme]


def check_sink_options(sinks: Iterable[SinkUri], options: Mapping[str, str] | None) -> None:
    """Check configuration-level sink options against the sinks they are given to.

    One options mapping serves every sink of a configuration (``traces_to``
    and ``snapshots_to``), so each sink takes the keys it knows and leaves
    the others; but a key that *no* configured sink takes is a typo or a
    leftover, and is refused here, at construction, rather than ignored.

    Args:
        sinks: The configuration's parsed sink URIs.
        options: The options, or None.

    Raises:
        ConfigError: A key no sink takes, a key a sink reserves
            (``bootstrap.servers``), or a bad value (``timeout_s``, booleans).
    """
    merged = dict(options or {})
    sinks = list(sinks)
    for key in merged:
        if not any(_takes(sink.scheme, key) for sink in sinks):
            schemes = ", ".join(sorted({s.scheme + "://" for s in sinks})) or "no sink"
            raise ConfigError(
                f"sink option {key!r} is taken by none of the configured sinks ({schemes}); "
                f"see docs/sinks.md for each sink's options"
            )
    for sink in sinks:
        taken = {k: v for k, v in merged.items() if _takes(sink.scheme, k)}
        _check_options(taken, sink.scheme, f"options for sink {sink.redacted!r}")


def resolve_sink_options(sink: SinkUri, options: Mapping[str, str] | None) -> dict[str, str]:
    """The options a sink opens with: the ``options`` it takes, overridden by the URI's query.

    Keys of ``options`` this sink's scheme does not take are left out: they
    are meant for the configuration's other sink (``check_sink_options``
    refuses a key no sink takes). The URI is the more specific statement (one
    sink), ``options`` the general one (e.g. security settings shared by every
    Kafka sink of a pipeline), so on a key given in both the URI wins.

    Args:
        sink: The parsed URI.
        options: Options from the configuration, or None.

    Returns:
        The merged options.

    Raises:
        ConfigError: A reserved key or a bad value.
    """
    merged = {k: v for k, v in (options or {}).items() if _takes(sink.scheme, k)}
    _check_options(merged, sink.scheme, f"options for sink {sink.redacted!r}")
    merged.update(sink.params)
    return merged
