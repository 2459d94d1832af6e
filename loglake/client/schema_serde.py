"""Producing and consuming records with registered schemas: :class:`SchemaProducer` and
:class:`SchemaConsumer`, thin layers over :class:`~loglake.client.Producer` /
:class:`~loglake.client.Consumer` that serialize with confluent-kafka's own Avro, JSON Schema
and Protobuf serializers (Confluent's wire format: magic byte 0, the big-endian int32 schema
id, for Protobuf the message indexes, then the payload), so the records read back with any
Confluent deserializer, loglake's typed tables and Spark views.

>>> with SchemaProducer("127.0.0.1:9092", registry="http://127.0.0.1:13092",   # doctest: +SKIP
...                     value_schema=CLICK_AVSC) as producer:
...     producer.send("clicks", {"user_id": 7, "page": "/"})
>>> with SchemaConsumer("127.0.0.1:9092", registry="http://127.0.0.1:13092") as consumer:
...     consumer.assign("clicks", start="earliest")                            # doctest: +SKIP
...     for record in consumer.consume(100, timeout=5):
...         print(record.value["user_id"], record.value_schema_id)

Producer side, per side (value, key): ``value_schema`` (Avro or JSON Schema text, or a
generated Protobuf message class) with ``schema_type`` (default AVRO; a Protobuf class implies
PROTOBUF) registers the schema under the subject (``value_subject``, default
TopicNameStrategy ``<topic>-value``) on first use (``auto_register=False``: it must be
registered already, else the registry's 40403 is raised); ``value_subject`` without a schema
serializes with the subject's latest version (Avro/JSON). A side with neither is sent as bytes
unchanged. Registration refused by the subject's compatibility level raises
:class:`~loglake.client.schema_registry.SchemaRegistryRequestError` (error 409) from ``send``.

Consumer side: ``value_format="registry"`` (default) decodes each value by the schema id it
carries, whatever the subject (Avro → dict, JSON → the decoded document, Protobuf → an
instance of ``value_protobuf`` when given, else of a message class built from the registered
``.proto`` and its imports, the message the record's indexes name), ``"raw"`` leaves bytes;
keys are ``key_format="raw"`` unless ``"registry"``. Null stays null. A record that does not decode
(not framed, unknown id, bad payload) raises :class:`SchemaSerdeError` naming its
topic-partition and offset (``on_error="raise"``, default) or, with ``on_error="keep"``,
comes back with that side ``None``, its bytes in ``value_bytes``/``key_bytes`` and the reason
in ``error`` (a dead-letter path), like the typed tables' ``value_error``.

Registry: ``registry=`` a URL, a :class:`~loglake.client.schema_registry.RegistrySettings` or
client properties (``schema.registry.url``, ``basic.auth.user.info``,
``schema.registry.ssl.ca.location``, ...); default: the same keys in ``security`` when it is a
mapping, else ``$LOGLAKE_SCHEMA_REGISTRY_URL``.

Thread-safety: as the wrapped clients (a producer may be shared; a consumer belongs to one
thread). Every other method and attribute of the wrapped client is reachable on the wrapper
(``flush``, ``commit``, ``seek``, transactions, ...), or through ``.producer`` /
``.consumer``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from kio.schema.errors import ErrorCode

from loglake.client import schema_registry
from loglake.client.consumer import Consumer
from loglake.client.model import Header, HeadersInput, normalize_headers
from loglake.client.producer import Delivery, DeliveryCallback, Producer
from loglake.client.schema_registry import (
    REGISTRY_URL_ENV,
    RegistrySettings,
    SchemaRegistryRequestError,
)
from loglake.client.security import SecurityConfig
from loglake.errors import LoglakeError
from loglake.schemas.wire import schema_id_of

SchemaType = Literal["AVRO", "JSON", "PROTOBUF"]
SCHEMA_TYPES: tuple[SchemaType, ...] = ("AVRO", "JSON", "PROTOBUF")
Format = Literal["registry", "raw"]
OnError = Literal["raise", "keep"]
RegistryInput = RegistrySettings | Mapping[str, str] | str



class SchemaSerdeError(LoglakeError):
    """A record could not be serialized with its schema, or a consumed record could not be
    decoded (the message says which record and why)."""

    code = ErrorCode.invalid_record


@dataclass(frozen=True)
class SchemaRecord:
    """One consumed record with its key and value decoded (see the module).

    ``key``/``value``: the decoded object (or the bytes, for a raw side; None for null or,
    with ``on_error="keep"``, for a side that did not decode); ``key_bytes``/``value_bytes``:
    the bytes as stored; ``*_schema_id``: the id of the framing (None: unframed or raw);
    ``error``: why a side did not decode (None: it did)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    key: Any
    value: Any
    headers: list[Header] = field(default_factory=list)
    key_bytes: bytes | None = None
    value_bytes: bytes | None = None
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    error: str | None = None


def registry_settings(registry: RegistryInput | None,
                      security: SecurityConfig | Mapping[str, str] | None = None
                      ) -> RegistrySettings:
    """The registry the helpers talk to (see the module for the defaults)."""
    if registry is not None:
        return schema_registry.coerce(registry)
    if isinstance(security, Mapping) and security.get("schema.registry.url"):
        return RegistrySettings.from_properties(security, environ={})
    url = os.environ.get(REGISTRY_URL_ENV, "").strip()
    if url:
        return schema_registry.coerce(url)
    raise schema_registry.SchemaRegistryConfigError(
        "no schema registry given",
        hint=f"pass registry=URL (or client properties with schema.registry.url), or set "
             f"${REGISTRY_URL_ENV}")


# ------------------------------------------------------------------------------ producing


class SchemaProducer:
    """A :class:`~loglake.client.Producer` whose ``send`` serializes keys and values with
    registered schemas (see the module)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        registry: RegistryInput | None = None,
        value_schema: str | type | None = None,
        key_schema: str | type | None = None,
        schema_type: SchemaType = "AVRO",
        key_schema_type: SchemaType | None = None,
        value_subject: str | None = None,
        key_subject: str | None = None,
        auto_register: bool = True,
        normalize: bool = False,
        security: SecurityConfig | Mapping[str, str] | None = None,
        producer: Producer | None = None,
        **producer_options: Any,
    ) -> None:
        """``producer``: send through this existing producer instead of creating one (it is
        closed with the wrapper); ``producer_options`` go to :class:`Producer` otherwise."""
        self.registry = registry_settings(registry, security)
        self._client = schema_registry.client(self.registry)
        self._value = _serializer(self._client, "value", value_schema, schema_type,
                                  value_subject, auto_register, normalize)
        self._key = _serializer(self._client, "key", key_schema, key_schema_type or schema_type,
                                key_subject, auto_register, normalize)
        self.producer = producer if producer is not None else Producer(
            bootstrap_servers, security=security, **producer_options)

    def serialize(self, topic: str, value: Any, *, key: Any = None,
                  headers: HeadersInput | None = None) -> tuple[bytes | None, bytes | None]:
        """``(key bytes, value bytes)`` as :meth:`send` would produce them."""
        wire_headers = normalize_headers(headers)
        return (_serialize(self._key, topic, "key", key, wire_headers),
                _serialize(self._value, topic, "value", value, wire_headers))

    def send(self, topic: str, value: Any, *, key: Any = None,
             headers: HeadersInput | None = None, partition: int | None = None,
             timestamp_ms: int | None = None,
             on_delivery: DeliveryCallback | None = None) -> Delivery:
        """Serialize ``key`` and ``value`` and send them (:meth:`Producer.send`)."""
        key_bytes, value_bytes = self.serialize(topic, value, key=key, headers=headers)
        return self.producer.send(topic, value_bytes, key=key_bytes, headers=headers,
                                  partition=partition, timestamp_ms=timestamp_ms,
                                  on_delivery=on_delivery)

    def send_and_wait(self, topic: str, value: Any, *, key: Any = None,
                      headers: HeadersInput | None = None, partition: int | None = None,
                      timestamp_ms: int | None = None,
                      timeout: float | None = None) -> tuple[int, int]:
        """Send one record, wait for its acknowledgement, return ``(partition, offset)``."""
        metadata = self.send(topic, value, key=key, headers=headers, partition=partition,
                             timestamp_ms=timestamp_ms).result(timeout)
        return metadata.partition, metadata.offset

    def close(self, timeout: float | None = None) -> None:
        self.producer.close(timeout)

    def __enter__(self) -> SchemaProducer:
        return self

    def __exit__(self, exc_type: object, *exc_info: object) -> None:
        self.producer.__exit__(exc_type, *exc_info)

    def __getattr__(self, name: str) -> Any:
        if name == "producer":  # not set: __init__ failed before creating it
            raise AttributeError(name)
        return getattr(self.producer, name)


@dataclass(frozen=True)
class _Side:
    serializer: Any  # a confluent-kafka serializer; None: bytes pass through


def _serializer(client: Any, side: str, schema: str | type | None, schema_type: SchemaType,
                subject: str | None, auto_register: bool, normalize: bool) -> _Side:
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    if schema is None and subject is None:
        return _Side(None)
    if isinstance(schema, type):
        schema_type = "PROTOBUF"
    if schema_type not in SCHEMA_TYPES:
        raise ValueError(f"schema_type must be one of {', '.join(SCHEMA_TYPES)}, "
                         f"got {schema_type!r}")
    conf: dict[str, Any] = {"auto.register.schemas": auto_register and schema is not None,
                            "normalize.schemas": normalize,
                            "use.latest.version": schema is None}
    if subject is not None:
        conf["subject.name.strategy"] = lambda _ctx, _record_name: subject
    if schema_type == "PROTOBUF":
        if not isinstance(schema, type):
            raise ValueError(f"a Protobuf {side} needs its generated message class as "
                             f"{side}_schema")
        conf["use.deprecated.format"] = False
        return _Side(ProtobufSerializer(schema, client, conf))
    if isinstance(schema, type):
        raise ValueError(f"{side}_schema is a class but schema_type is {schema_type}")
    if schema_type == "AVRO":
        return _Side(AvroSerializer(client, schema, conf=conf))
    return _Side(JSONSerializer(schema, client, conf=conf))


def _serialize(side: _Side, topic: str, field_name: str, data: Any,
               headers: Any) -> bytes | None:
    from confluent_kafka.serialization import MessageField, SerializationContext

    if data is None:
        return None
    if side.serializer is None:
        if isinstance(data, bytes | bytearray | memoryview | str):
            return data.encode() if isinstance(data, str) else bytes(data)
        raise SchemaSerdeError(
            f"{field_name} for {topic!r} is a {type(data).__name__}, but this producer has no "
            f"{field_name} schema", hint=f"pass {field_name}_schema= or {field_name}_subject=")
    context = SerializationContext(
        topic, MessageField.VALUE if field_name == "value" else MessageField.KEY, headers)
    try:
        return bytes(side.serializer(data, context))
    except SchemaRegistryRequestError:
        raise
    except Exception as exc:
        from confluent_kafka.schema_registry.error import SchemaRegistryError

        if isinstance(exc, SchemaRegistryError):
            raise schema_registry.request_error(
                exc, f"serializing a {field_name} for {topic!r}") from None
        raise SchemaSerdeError(f"cannot serialize a {field_name} for {topic!r}: "
                               f"{type(exc).__name__}: {_first_line(exc)}") from None


def _reference(reference: Any) -> Any:
    from loglake.schemas.model import SchemaReference

    return SchemaReference(str(reference.name), str(reference.subject), int(reference.version))


def _no_subject(_ctx: Any, _record_name: Any) -> None:
    return None


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else "no message"


# ------------------------------------------------------------------------------ consuming


class SchemaConsumer:
    """A :class:`~loglake.client.Consumer` whose ``poll``/``consume`` return
    :class:`SchemaRecord` with keys and values decoded (see the module)."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        registry: RegistryInput | None = None,
        value_format: Format = "registry",
        key_format: Format = "raw",
        value_protobuf: type | None = None,
        key_protobuf: type | None = None,
        on_error: OnError = "raise",
        security: SecurityConfig | Mapping[str, str] | None = None,
        consumer: Consumer | None = None,
        **consumer_options: Any,
    ) -> None:
        for name, given, allowed in (("value_format", value_format, ("registry", "raw")),
                                     ("key_format", key_format, ("registry", "raw")),
                                     ("on_error", on_error, ("raise", "keep"))):
            if given not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {given!r}")
        self.registry = registry_settings(registry, security)
        self._client = schema_registry.client(self.registry)
        self._formats = {"key": key_format, "value": value_format}
        self._protobuf = {"key": key_protobuf, "value": value_protobuf}
        self.on_error = on_error
        self._deserializers: dict[tuple[str, str], Any] = {}
        self._types: dict[int, str] = {}
        self._parsed: dict[int, Any] = {}  # schema id -> ParsedSchema (Protobuf, no class)
        self.consumer = consumer if consumer is not None else Consumer(
            bootstrap_servers, security=security, **consumer_options)

    def poll(self, timeout: float = 1.0) -> SchemaRecord | None:
        """The next record decoded, or ``None`` if none arrived within ``timeout`` s."""
        record = self.consumer.poll(timeout)
        return None if record is None else self.decode(record)

    def consume(self, max_records: int | None = None, *,
                timeout: float | None = 5.0) -> Iterator[SchemaRecord]:
        """:meth:`Consumer.consume`, decoded."""
        for record in self.consumer.consume(max_records, timeout=timeout):
            yield self.decode(record)

    def decode(self, record: Any) -> SchemaRecord:
        """A consumed :class:`~loglake.client.Record` decoded (see the module)."""
        errors: list[str] = []
        decoded: dict[str, Any] = {}
        ids: dict[str, int | None] = {}
        for side in ("key", "value"):
            data = getattr(record, side)
            ids[side] = schema_id_of(data) if self._formats[side] == "registry" else None
            try:
                decoded[side] = self._decode(record, side, data)
            except SchemaSerdeError as exc:
                if self.on_error == "raise":
                    raise
                decoded[side] = None
                errors.append(exc.message)
        return SchemaRecord(
            topic=record.topic, partition=record.partition, offset=record.offset,
            timestamp_ms=record.timestamp_ms, key=decoded["key"], value=decoded["value"],
            headers=list(record.headers), key_bytes=record.key, value_bytes=record.value,
            key_schema_id=ids["key"], value_schema_id=ids["value"],
            error="; ".join(errors) or None)

    def _decode(self, record: Any, side: str, data: bytes | None) -> Any:
        from confluent_kafka.serialization import MessageField, SerializationContext

        if data is None or self._formats[side] == "raw":
            return data
        where = f"{side} of {record.topic}-{record.partition}@{record.offset}"
        schema_id = schema_id_of(data)
        if schema_id is None:
            detail = (f"magic byte 0x{data[0]:02x}" if data else "empty")
            raise SchemaSerdeError(f"{where} is not framed with a schema id ({detail})")
        deserializer = self._deserializer(side, schema_id, where)
        context = SerializationContext(
            record.topic, MessageField.VALUE if side == "value" else MessageField.KEY,
            list(record.headers))
        try:
            return deserializer(data, context)
        except Exception as exc:
            raise SchemaSerdeError(f"{where}: schema id {schema_id}: "
                                   f"{type(exc).__name__}: {_first_line(exc)}") from None

    def _deserializer(self, side: str, schema_id: int, where: str) -> Any:
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        schema_type = self._types.get(schema_id)
        if schema_type is None:
            try:
                # fmt=serialized: the registry client caches by id whatever the format, and
                # the Protobuf deserializer needs the serialized form (Avro/JSON: the text)
                schema_type = self._client.get_schema(
                    schema_id, fmt="serialized").schema_type or "AVRO"
            except Exception as exc:
                error = schema_registry.request_error(exc, f"{where}: schema id {schema_id}")
                raise SchemaSerdeError(error.message) from None
            self._types[schema_id] = schema_type
        cached = self._deserializers.get((side, schema_type))
        if cached is not None:
            return cached
        # decode by the id alone: no subject in the schema look-up (the record's schema may
        # belong to any subject, e.g. one set by value.schema.subject)
        conf: dict[str, Any] = {"subject.name.strategy": _no_subject}
        if schema_type == "AVRO":
            made = AvroDeserializer(self._client, conf=conf)
        elif schema_type == "JSON":
            made = JSONDeserializer(None, schema_registry_client=self._client, conf=conf)
        elif schema_type == "PROTOBUF":
            message_class = self._protobuf[side]
            if message_class is None:  # a message class built from the registered schema
                return functools.partial(self._dynamic_protobuf, schema_id)
            made = ProtobufDeserializer(message_class, {**conf, "use.deprecated.format": False},
                                        schema_registry_client=self._client)
        else:
            raise SchemaSerdeError(f"{where}: schema id {schema_id} has unknown type "
                                   f"{schema_type!r}")
        self._deserializers[(side, schema_type)] = made
        return made

    def _dynamic_protobuf(self, schema_id: int, data: bytes, _context: Any) -> Any:
        """``data`` decoded as the message its indexes name in schema ``schema_id``, with a
        class built from the registered schema and its imports (loglake.schemas.parse)."""
        from loglake.schemas import parse, wire

        parsed = self._parsed.get(schema_id)
        if parsed is None:
            parsed = parse.parse_registered(self._registered(schema_id), self._referenced)
            self._parsed[schema_id] = parsed
        indexes, payload = wire.message_indexes(wire.unframe(data).body)
        message = parse.message_class(parsed, indexes)()
        message.ParseFromString(bytes(payload))
        return message

    def _registered(self, schema_id: int) -> Any:
        from loglake.schemas.model import RegisteredSchema

        schema = self._client.get_schema(schema_id, fmt="serialized")
        return RegisteredSchema(schema_id, schema.schema_type or "AVRO", schema.schema_str,
                                tuple(_reference(r) for r in schema.references or ()))

    def _referenced(self, reference: Any) -> Any:
        from loglake.schemas.model import RegisteredSchema

        found = self._client.get_version(reference.subject, reference.version)
        schema = found.schema
        return RegisteredSchema(found.schema_id, schema.schema_type or "AVRO",
                                schema.schema_str,
                                tuple(_reference(r) for r in schema.references or ()))

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> SchemaConsumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        if name == "consumer":  # not set: __init__ failed before creating it
            raise AttributeError(name)
        return getattr(self.consumer, name)
