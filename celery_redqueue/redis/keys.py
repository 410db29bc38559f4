"""The only place key strings are built.

Every key of one structure shares a hash tag, ``<prefix>:{<kind>:<name>}:<part>``, so that all
keys one Lua script touches live in one Redis Cluster slot.
"""

from __future__ import annotations

from ..errors import ConfigurationError

DEFAULT_PREFIX = "redqueue"


def normalize_prefix(prefix: str) -> str:
    """Return ``prefix`` without trailing colons, refusing empty ones and hash-tag braces."""
    if not isinstance(prefix, str):
        raise ConfigurationError(f"redqueue_key_prefix must be a string, got {prefix!r}")
    cleaned = prefix.strip().rstrip(":")
    if not cleaned:
        raise ConfigurationError("redqueue_key_prefix must not be empty")
    if "{" in cleaned or "}" in cleaned:
        raise ConfigurationError(
            f"redqueue_key_prefix {prefix!r} must not contain '{{' or '}}' (they are hash tags)"
        )
    return cleaned


def validate_name(name: str, what: str = "name") -> str:
    """Refuse names that would break the hash tag (braces) or are empty."""
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{what} must be a non-empty string, got {name!r}")
    if "{" in name or "}" in name:
        raise ConfigurationError(f"{what} {name!r} must not contain '{{' or '}}'")
    return name


class StructureKeys:
    """Builds the keys of one structure: ``keys("items")`` -> ``prefix:{pool:events}:items``."""

    def __init__(self, prefix: str, kind: str, name: str) -> None:
        self.prefix = normalize_prefix(prefix)
        self.kind = kind
        self.name = validate_name(name)
        self.base = f"{self.prefix}:{{{kind}:{self.name}}}"

    def __call__(self, part: str) -> str:
        return f"{self.base}:{part}"

    def __repr__(self) -> str:
        return f"StructureKeys({self.base!r})"


def registry_key(prefix: str) -> str:
    """The set naming every structure of this prefix, as ``kind:name`` members."""
    return f"{normalize_prefix(prefix)}:registry"
