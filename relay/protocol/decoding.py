"""Decoding JSON from outside (hooks, hosts, files) with one error type for every failure."""

from __future__ import annotations

from typing import Any

import msgspec

_decoder = msgspec.json.Decoder()


class JsonDecodeError(ValueError):
    """JSON that cannot be decoded; `syntax` is True for malformed text (not merely odd values)."""

    def __init__(self, message: str, *, syntax: bool) -> None:
        self.syntax = syntax
        super().__init__(message)


def decode_json(data: bytes) -> Any:
    """Decode JSON; malformed text, bad UTF-8, out-of-range numbers and deep nesting all
    raise JsonDecodeError (msgspec raises four different exceptions for these)."""
    try:
        return _decoder.decode(data)
    except msgspec.ValidationError as exc:  # e.g. "Number out of range"
        raise JsonDecodeError(str(exc), syntax=False) from None
    except msgspec.DecodeError as exc:
        raise JsonDecodeError(str(exc), syntax=True) from None
    except UnicodeDecodeError as exc:
        raise JsonDecodeError(f"not valid UTF-8 at byte {exc.start}", syntax=False) from None
    except RecursionError:
        raise JsonDecodeError("nested too deeply", syntax=False) from None


def split_validation_error(exc: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec's "Expected `str`, got `int` - at `$.decision`" as (message, path)."""
    message, _, path = str(exc).partition(" - at `")
    return message[:1].lower() + message[1:], path.rstrip("`") or "$"


def json_type_name(value: object) -> str:
    """The JSON type of a decoded value: object, array, string, boolean, null or number."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def json_type(value: object) -> str:
    """The JSON type of a decoded value with its article: an object, an array, … null."""
    name = json_type_name(value)
    if name == "null":
        return name
    return ("an " if name[0] in "aeiou" else "a ") + name
