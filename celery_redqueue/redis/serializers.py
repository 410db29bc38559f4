"""A thin layer over kombu's serializer registry.

JSON is the default and is written canonically (sorted keys, no spaces) so that equal payloads
are equal bytes, which coalescing pools rely on. Pickle works only when chosen by name, and
warns: loading pickles from a shared Redis executes whatever code was stored.
"""

from __future__ import annotations

import json
import json.encoder as json_encoder
import warnings
from typing import Any, Protocol, runtime_checkable

# kombu-stubs (from celery-types) omit the module's public registry.
from kombu.serialization import registry  # type: ignore[attr-defined]
from kombu.utils import json as kombu_json

from ..errors import ConfigurationError, PickleWarning, SerializationError


def _short(obj: object) -> str:
    """A bounded repr for error messages (a deeply nested value has no usable repr)."""
    try:
        text = repr(obj)
    except RecursionError:
        return f"a {type(obj).__name__} nested too deep to show"
    return text if len(text) <= 200 else text[:200] + "..."


@runtime_checkable
class Serializer(Protocol):
    """Anything with ``dumps(obj) -> bytes | str`` and ``loads(data) -> obj``.

    Pools, buckets and streams pass ``loads`` the stored bytes; sorted sets pass text (``str``),
    as ``redset`` did, so a ``redset`` serializer works unchanged. Subclassing is optional.
    """

    def dumps(self, obj: object) -> bytes | str: ...

    # Untyped on purpose: an implementation may take only the form its structure stores (the
    # sets' StrSerializer takes str), so no one parameter type fits every serializer.
    def loads(self, data: Any) -> object: ...


class JSONSerializer:
    """kombu's JSON (datetimes, UUIDs, Decimals round-trip), written canonically."""

    name = "json"

    #: kombu's encoder, built once (what ``kombu_json.dumps`` builds per call).
    _encoder = kombu_json.JSONEncoder(sort_keys=True, separators=(",", ":"))
    #: The C encoder that ``_encoder.encode`` builds again on every call, built once (a third
    #: of the cost for a small call's arguments). No circular-reference markers: a cycle
    #: recurses until RecursionError, reported like any value nested too deep.
    _c_make_encoder = getattr(json_encoder, "c_make_encoder", None)  # None: no C speedups
    _c_encode = (
        None
        if _c_make_encoder is None
        else _c_make_encoder(
            None,
            _encoder.default,
            json_encoder.encode_basestring_ascii,
            None,
            ":",
            ",",
            True,  # sort_keys
            False,  # skipkeys
            True,  # allow_nan, as json.dumps
        )
    )

    def dumps(self, obj: object) -> bytes:
        try:
            if self._c_encode is not None and not isinstance(obj, str):
                text = "".join(self._c_encode(obj, 0))
            else:
                text = self._encoder.encode(obj)
        except (TypeError, ValueError, RecursionError) as exc:
            # RecursionError: a value nested deeper than the encoder recurses (about 1,000
            # levels up to Python 3.12, some 10,000 on 3.13).
            raise SerializationError(f"cannot serialize {_short(obj)} as JSON: {exc}") from exc
        return text.encode()

    #: The stdlib's scanner, built once: what ``json.loads`` runs without kombu's hook.
    _scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]

    def loads(self, data: bytes | str) -> object:
        # kombu's hook only turns {"__type__": ..., "__value__": ...} back into typed values
        # and costs more than the parse itself (a drain decodes every call), so bytes that
        # cannot hold that key, even escaped, skip it.
        if isinstance(data, bytes) and b"__type__" not in data and b"\\u" not in data:
            try:
                text = data.decode()
                value, end = self._scan(text, 0)
            except (UnicodeDecodeError, StopIteration, ValueError, RecursionError):
                pass  # kombu's loads below reports it
            else:
                if end == len(text):
                    return value
        try:
            return kombu_json.loads(data)
        except (TypeError, ValueError, json.JSONDecodeError, RecursionError) as exc:
            raise SerializationError(f"stored payload is not valid JSON: {exc}") from exc


class KombuSerializer:
    """Any other serializer registered with kombu (msgpack, yaml, pickle, your own)."""

    def __init__(self, name: str) -> None:
        if name not in registry.name_to_type:
            raise ConfigurationError(
                f"redqueue_serializer {name!r} is not registered with kombu "
                f"(known: {sorted(registry.name_to_type)})"
            )
        self.name = name
        # kombu's public registry names the content type; dumps() also says the encoding.
        try:
            self.content_type, self.content_encoding, _ = registry.dumps("", serializer=name)
        except Exception as exc:  # a serializer of one's own that cannot encode a string
            raise ConfigurationError(
                f"redqueue_serializer {name!r} cannot encode a string: {exc!r}"
            ) from exc

    def dumps(self, obj: object) -> bytes:
        try:
            _, _, data = registry.dumps(obj, serializer=self.name)
        except Exception as exc:  # kombu wraps encoder errors in its own types
            raise SerializationError(
                f"cannot serialize {_short(obj)} with {self.name}: {exc}"
            ) from exc
        return data if isinstance(data, bytes) else data.encode()

    def loads(self, data: bytes | str) -> object:
        try:
            return registry.loads(
                data, self.content_type, self.content_encoding, accept={self.content_type}
            )
        except Exception as exc:
            raise SerializationError(f"cannot read payload with {self.name}: {exc}") from exc


def get_serializer(spec: str | Serializer | None) -> Serializer:
    """Resolve a serializer name (``"json"`` default) or return a serializer object as is."""
    if spec is None or spec == "json":
        return JSONSerializer()
    if isinstance(spec, str):
        if spec == "pickle":
            warnings.warn(
                "redqueue is using pickle: anyone who can write to this Redis can run code in "
                "your workers. Use it only on a Redis you fully trust.",
                PickleWarning,
                stacklevel=3,
            )
        return KombuSerializer(spec)
    if isinstance(spec, Serializer):
        return spec
    raise ConfigurationError(
        f"redqueue_serializer must be a name or an object with dumps/loads, got {spec!r}"
    )


def to_bytes(data: bytes | str) -> bytes:
    """Serializers may return text; Redis stores bytes."""
    return data if isinstance(data, bytes) else data.encode()
