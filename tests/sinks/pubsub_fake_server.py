"""Test peer: an in-process Pub/Sub server speaking Google's real gRPC protocol, on loopback.

This is a *test peer*, not part of beam-agents. It is the fallback the
Pub/Sub sink tests use where Google's Pub/Sub emulator is not installed (and,
on machines that have the emulator, a second peer the same tests run against,
so the fallback is proven where the emulator can check it; see
``tests/sinks/conftest.py``). Clients reach it exactly as they reach the
emulator: ``PUBSUB_EMULATOR_HOST=127.0.0.1:PORT``, then the unmodified
``google.cloud.pubsub_v1.PublisherClient`` / ``SubscriberClient``.

It is a real gRPC server (``grpc.server`` on ``127.0.0.1:0``) registering the
``google.pubsub.v1.Publisher`` and ``google.pubsub.v1.Subscriber`` services
with ``grpc.method_handlers_generic_handler``; requests and responses are
(de)serialized with the ``google.pubsub_v1.types`` messages the client itself
uses, so what crosses the wire is the Pub/Sub protocol, byte for byte.

What it implements, with the semantics of the service where our tests rely on
them (checked against Google's emulator 0.8.20, whose status codes and
messages it answers with, except where noted):

- Publisher ``CreateTopic``, ``GetTopic``, ``Publish``. Topic and
  subscription names are validated as the service does
  (``projects/P/topics/T``: T of 3-255 characters, starting with a letter,
  not with ``goog``). ``Publish`` refuses a missing topic (NOT_FOUND), an
  empty request, an empty message, more than 1,000 messages or more than
  10 MB (INVALID_ARGUMENT; the 10 MB answer is the service's documented one,
  the emulator never answers such a request); it assigns each message a unique ``message_id``
  and a ``publish_time``, and appends it, in request order, to every
  subscription that exists at that moment (a subscription sees only what was
  published after it was created, as in the service).
- Subscriber ``CreateSubscription`` (defaults filled as the emulator does:
  ack deadline 10 s, retention 7 days), ``GetSubscription``, ``Pull``,
  ``Acknowledge``, ``ModifyAckDeadline`` (0 = nack).
- Ordering: messages are kept per subscription in publish order. On a
  subscription with ``enable_message_ordering``, a key's messages are not
  delivered while an earlier message of that key is outstanding (delivered,
  not acknowledged, ack deadline not passed); one pull may carry several
  messages of one key, in order. When an outstanding message of a key
  expires or is nacked, that key's later outstanding messages are released
  with it, so the key is redelivered in order, as the service documents (the
  emulator redelivered a nacked message after its successor).
- ``Pull`` without messages to give waits for some until one second before
  the call's deadline (60 s without one), as the emulator does, or returns at
  once with ``return_immediately``.

Not implemented (the server answers UNIMPLEMENTED, as gRPC does for any
unknown method): ``StreamingPull`` (the tests read back with synchronous
``pull`` + ``acknowledge``), updates, deletes, listings, snapshots, seek,
schemas, IAM, push and BigQuery/Cloud Storage subscriptions, filters, dead
letter policies, exactly-once delivery, retention expiry.

Where the service leaves a choice open, this server is simpler than the
emulator, and tests must not depend on either: which eligible messages a
``pull`` capped by ``max_messages`` returns (here: the oldest), message ids
(here: decimal counters, unique per server), ack ids (opaque strings).
"""

from __future__ import annotations

import datetime
import itertools
import re
import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.pubsub_v1 import types

__all__ = ["InProcessPubSubServer"]

MAX_MESSAGES_PER_PUBLISH = 1000
MAX_PUBLISH_REQUEST_BYTES = 10 * 1024 * 1024
DEFAULT_ACK_DEADLINE_S = 10
MAX_ACK_DEADLINE_S = 600
DEFAULT_RETENTION = datetime.timedelta(days=7)
PULL_WAIT_WITHOUT_DEADLINE_S = 60.0
PULL_ANSWER_BEFORE_DEADLINE_S = 1.0
"""A waiting pull answers (empty) this long before the call's deadline, as the emulator does."""

# The service's resource-id rule: a letter, then 2-254 of [A-Za-z0-9-_.~+%].
_RESOURCE_ID = r"[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}"
_TOPIC_NAME = re.compile(rf"projects/[^/]+/topics/({_RESOURCE_ID})")
_SUBSCRIPTION_NAME = re.compile(rf"projects/[^/]+/subscriptions/({_RESOURCE_ID})")


class _Refused(Exception):
    """An RPC refused with a gRPC status (turned into ``context.abort`` by the handler wrapper)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


def _valid_name(pattern: re.Pattern[str], name: str) -> bool:
    match = pattern.fullmatch(name)
    return match is not None and not match.group(1).lower().startswith("goog")


def _check_topic_name(name: str) -> None:
    if not _valid_name(_TOPIC_NAME, name):
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid [topics] name: (name={name})")


def _check_subscription_name(name: str) -> None:
    if not _valid_name(_SUBSCRIPTION_NAME, name):
        raise _Refused(
            grpc.StatusCode.INVALID_ARGUMENT, f"Invalid [subscriptions] name: (name={name})"
        )


def _check_ack_deadline(seconds: int) -> None:
    if not 0 <= seconds <= MAX_ACK_DEADLINE_S:
        raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "ack_deadline_secs out of bounds")


@dataclass
class _Pending:
    """One message in one subscription's backlog, until it is acknowledged."""

    message: Any  # types.PubsubMessage, shared by every subscription's copy
    ack_id: str | None = None
    """Set while the message is outstanding (delivered, not acknowledged, not expired)."""
    deadline: float = 0.0
    """``time.monotonic()`` at which an outstanding message becomes deliverable again."""


@dataclass
class _Subscription:
    config: Any  # types.Subscription, as created (defaults filled)
    backlog: list[_Pending] = field(default_factory=list)
    """Unacknowledged messages in publish order."""

    @property
    def ordered(self) -> bool:
        return bool(self.config.enable_message_ordering)

    def release_expired(self, now: float) -> None:
        """Make expired outstanding messages deliverable again (a key's later ones with them)."""
        released_keys: set[str] = set()
        for pending in self.backlog:
            if pending.ack_id is None:
                continue
            key = pending.message.ordering_key if self.ordered else ""
            if pending.deadline <= now or (key and key in released_keys):
                pending.ack_id = None
                if key:
                    released_keys.add(key)

    def take(self, max_messages: int, now: float, new_ack_id: Callable[[], str]) -> list[Any]:
        """Deliver up to ``max_messages`` oldest deliverable messages; return ReceivedMessages."""
        self.release_expired(now)
        blocked = (
            {p.message.ordering_key for p in self.backlog if p.ack_id is not None}
            if self.ordered
            else set()
        )
        blocked.discard("")
        deadline = now + self.config.ack_deadline_seconds
        received: list[Any] = []
        for pending in self.backlog:
            if len(received) >= max_messages:
                break
            if pending.ack_id is not None or pending.message.ordering_key in blocked:
                continue
            pending.ack_id = new_ack_id()
            pending.deadline = deadline
            received.append(types.ReceivedMessage(ack_id=pending.ack_id, message=pending.message))
        return received

    def outstanding(self, ack_ids: set[str]) -> list[_Pending]:
        return [p for p in self.backlog if p.ack_id is not None and p.ack_id in ack_ids]


class _PubSubState:
    """Topics and subscriptions, behind one condition (pulls wait on it for publishes)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.closed = False
        self.topics: dict[str, Any] = {}  # name -> types.Topic
        self.subscriptions: dict[str, _Subscription] = {}
        self._message_ids = itertools.count(1)
        self._ack_ids = itertools.count(1)

    def new_ack_id(self) -> str:
        return f"ack-{next(self._ack_ids)}"

    def subscription(self, name: str) -> _Subscription:
        _check_subscription_name(name)
        found = self.subscriptions.get(name)
        if found is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, "Subscription does not exist")
        return found

    # ---------------------------------------------------------------- Publisher

    def create_topic(self, request: Any, context: grpc.ServicerContext) -> Any:
        _check_topic_name(request.name)
        with self.changed:
            if request.name in self.topics:
                raise _Refused(grpc.StatusCode.ALREADY_EXISTS, "Topic already exists")
            self.topics[request.name] = request
        return request

    def get_topic(self, request: Any, context: grpc.ServicerContext) -> Any:
        _check_topic_name(request.topic)
        with self.changed:
            topic = self.topics.get(request.topic)
        if topic is None:
            raise _Refused(grpc.StatusCode.NOT_FOUND, "Topic not found")
        return topic

    def publish(self, request: Any, context: grpc.ServicerContext) -> Any:
        _check_topic_name(request.topic)
        messages = list(request.messages)
        if not messages:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "No messages to publish")
        if len(messages) > MAX_MESSAGES_PER_PUBLISH:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "Too many messages to publish")
        if types.PublishRequest.pb(request).ByteSize() > MAX_PUBLISH_REQUEST_BYTES:
            raise _Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"Request payload size exceeds the limit: {MAX_PUBLISH_REQUEST_BYTES} bytes.",
            )
        if any(not m.data and not m.attributes for m in messages):
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "Some messages are empty")
        with self.changed:
            if request.topic not in self.topics:
                raise _Refused(grpc.StatusCode.NOT_FOUND, "Topic not found")
            receivers = [s for s in self.subscriptions.values() if s.config.topic == request.topic]
            published_at = datetime.datetime.now(datetime.UTC)
            message_ids: list[str] = []
            for message in messages:
                stored = types.PubsubMessage(
                    data=message.data,
                    attributes=dict(message.attributes),
                    ordering_key=message.ordering_key,
                    message_id=str(next(self._message_ids)),
                    publish_time=published_at,
                )
                message_ids.append(stored.message_id)
                for subscription in receivers:
                    subscription.backlog.append(_Pending(stored))
            self.changed.notify_all()
        return types.PublishResponse(message_ids=message_ids)

    # ---------------------------------------------------------------- Subscriber

    def create_subscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        _check_subscription_name(request.name)
        _check_topic_name(request.topic)
        _check_ack_deadline(request.ack_deadline_seconds)
        with self.changed:
            if request.name in self.subscriptions:
                raise _Refused(grpc.StatusCode.ALREADY_EXISTS, "Subscription already exists")
            if request.topic not in self.topics:
                raise _Refused(grpc.StatusCode.NOT_FOUND, "Subscription topic does not exist")
            if not request.ack_deadline_seconds:
                request.ack_deadline_seconds = DEFAULT_ACK_DEADLINE_S
            if "message_retention_duration" not in request:
                request.message_retention_duration = DEFAULT_RETENTION
            if "push_config" not in request:
                request.push_config = types.PushConfig()
            self.subscriptions[request.name] = _Subscription(request)
        return request

    def get_subscription(self, request: Any, context: grpc.ServicerContext) -> Any:
        with self.changed:
            return self.subscription(request.subscription).config

    def pull(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.max_messages <= 0:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "No max_messages specified")
        remaining = context.time_remaining()
        wait_s = (
            PULL_WAIT_WITHOUT_DEADLINE_S
            if remaining is None
            else max(0.0, remaining - PULL_ANSWER_BEFORE_DEADLINE_S)
        )
        give_up_at = time.monotonic() + wait_s
        # A cancelled call or a closing server wakes a waiting pull at once.
        context.add_callback(self._wake)
        with self.changed:
            subscription = self.subscription(request.subscription)
            while True:
                now = time.monotonic()
                received = subscription.take(request.max_messages, now, self.new_ack_id)
                if received or request.return_immediately or self.closed:
                    break
                if now >= give_up_at or not context.is_active():
                    break
                # Wake for a publish, an ack/nack, or the next ack deadline to pass.
                deadlines = [p.deadline for p in subscription.backlog if p.ack_id is not None]
                self.changed.wait(min([give_up_at, *deadlines]) - now)
        return types.PullResponse(received_messages=received)

    def acknowledge(self, request: Any, context: grpc.ServicerContext) -> Any:
        ack_ids = set(request.ack_ids)
        if not ack_ids:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "No ack ids specified.")
        with self.changed:
            subscription = self.subscription(request.subscription)
            # Unknown or expired ack ids are ignored, as by the service.
            acked = {id(p) for p in subscription.outstanding(ack_ids)}
            subscription.backlog = [p for p in subscription.backlog if id(p) not in acked]
            self.changed.notify_all()
        return empty_pb2.Empty()

    def modify_ack_deadline(self, request: Any, context: grpc.ServicerContext) -> Any:
        ack_ids = set(request.ack_ids)
        if not ack_ids:
            raise _Refused(grpc.StatusCode.INVALID_ARGUMENT, "No ack ids specified.")
        _check_ack_deadline(request.ack_deadline_seconds)
        with self.changed:
            subscription = self.subscription(request.subscription)
            deadline = time.monotonic() + request.ack_deadline_seconds
            for pending in subscription.outstanding(ack_ids):
                pending.deadline = deadline
            self.changed.notify_all()
        return empty_pb2.Empty()

    def _wake(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def close(self) -> None:
        with self.changed:
            self.closed = True
            self.changed.notify_all()


def _unary(
    method: Callable[[Any, grpc.ServicerContext], Any], request_type: Any, response_type: Any
) -> grpc.RpcMethodHandler:
    """A unary-unary handler (de)serializing with the client's own message types."""

    def handle(request: Any, context: grpc.ServicerContext) -> Any:
        try:
            return method(request, context)
        except _Refused as refused:
            context.abort(refused.code, refused.details)

    return grpc.unary_unary_rpc_method_handler(
        handle,
        request_deserializer=request_type.deserialize,
        response_serializer=response_type.serialize,
    )


class _Empty:
    """``google.protobuf.Empty`` with the proto-plus ``serialize`` spelling the handlers use."""

    @staticmethod
    def serialize(message: empty_pb2.Empty) -> bytes:
        return message.SerializeToString()


class InProcessPubSubServer:
    """Google's Pub/Sub gRPC services (the subset above) on ``127.0.0.1:<free port>``.

    Args:
        thread_name_prefix: Name prefix of the server's handler threads (the
            sink tests recognise their peers' threads by it).

    Attributes:
        port: The port it listens on.
        host: ``127.0.0.1:port``, the value for ``PUBSUB_EMULATOR_HOST``.
    """

    def __init__(self, *, thread_name_prefix: str = "pubsub-fake-server") -> None:
        self._state = state = _PubSubState()
        publisher = grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Publisher",
            {
                "CreateTopic": _unary(state.create_topic, types.Topic, types.Topic),
                "GetTopic": _unary(state.get_topic, types.GetTopicRequest, types.Topic),
                "Publish": _unary(state.publish, types.PublishRequest, types.PublishResponse),
            },
        )
        subscriber = grpc.method_handlers_generic_handler(
            "google.pubsub.v1.Subscriber",
            {
                "CreateSubscription": _unary(
                    state.create_subscription, types.Subscription, types.Subscription
                ),
                "GetSubscription": _unary(
                    state.get_subscription, types.GetSubscriptionRequest, types.Subscription
                ),
                "Pull": _unary(state.pull, types.PullRequest, types.PullResponse),
                "Acknowledge": _unary(state.acknowledge, types.AcknowledgeRequest, _Empty),
                "ModifyAckDeadline": _unary(
                    state.modify_ack_deadline, types.ModifyAckDeadlineRequest, _Empty
                ),
            },
        )
        self._server = grpc.server(
            # Waiting pulls hold a thread each; leave room for publishes beside them.
            futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=thread_name_prefix),
            handlers=(publisher, subscriber),
            # Above the service's 10 MB publish limit, so an oversized request
            # gets the service's INVALID_ARGUMENT rather than gRPC's own refusal.
            options=[("grpc.max_receive_message_length", 2 * MAX_PUBLISH_REQUEST_BYTES)],
        )
        self.port: int = self._server.add_insecure_port("127.0.0.1:0")
        self.host = f"127.0.0.1:{self.port}"
        self._server.start()

    def close(self) -> None:
        """Stop serving: waiting pulls return, open calls are cancelled."""
        self._state.close()
        self._server.stop(grace=None).wait()
