"""An MCP tool made from a typed async function: its input schema and its argument checks.

The schema is the one the official SDK derived from the same signature (pydantic's model
schema: a `title` per property and `{function}Arguments` for the whole, `anyOf` with null
for an optional type), so hosts see the same tools as before relay served MCP itself;
tests/test_mcp.py compares the two. Arguments are checked as the SDK's pydantic model
checked them in its lax mode: text must be text, a flag may also be written `"true"` or
`1`, a list may arrive as JSON inside a string (some hosts send it so), and an argument
the tool does not take is ignored.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

ToolFunction = Callable[..., Awaitable[str]]

_NO_DEFAULT: Any = inspect.Parameter.empty
_TRUE_WORDS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_WORDS = frozenset({"0", "off", "f", "false", "n", "no"})


class ToolError(Exception):
    """A call the tool refuses: its text reaches the model as the tool's error."""


class ArgumentError(ToolError):
    """A tool's arguments that do not fit its signature, naming the argument."""


@dataclass(frozen=True)
class Parameter:
    """One argument of a tool: its name, its type and its default (if it has one)."""

    name: str
    kind: type | types.UnionType | types.GenericAlias
    default: object = _NO_DEFAULT

    @property
    def required(self) -> bool:
        return self.default is _NO_DEFAULT

    @property
    def schema(self) -> dict[str, object]:
        schema = {**_type_schema(self.kind)}
        if not self.required:
            schema["default"] = self.default
        # pydantic's title for a field: its name, title-cased, underscores as spaces.
        schema["title"] = self.name.title().replace("_", " ")
        return schema


@dataclass(frozen=True)
class Tool:
    """An MCP tool: what `tools/list` shows of it and the function `tools/call` runs."""

    name: str
    description: str
    function: ToolFunction
    parameters: tuple[Parameter, ...]

    @property
    def input_schema(self) -> dict[str, object]:
        schema: dict[str, object] = {
            "properties": {parameter.name: parameter.schema for parameter in self.parameters}
        }
        required = [parameter.name for parameter in self.parameters if parameter.required]
        if required:
            schema["required"] = required
        schema["type"] = "object"
        schema["title"] = f"{self.function.__name__}Arguments"
        return schema

    @property
    def listing(self) -> dict[str, object]:
        """The tool as `tools/list` shows it."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }

    def arguments(self, given: Mapping[str, object]) -> dict[str, object]:
        """The keyword arguments for the function from a call's `arguments`, or
        ArgumentError naming the first one that does not fit."""
        checked: dict[str, object] = {}
        for parameter in self.parameters:
            if parameter.name not in given:
                if parameter.required:
                    raise ArgumentError(f"`{parameter.name}` is required")
                checked[parameter.name] = parameter.default
                continue
            checked[parameter.name] = _checked(
                parameter.name, parameter.kind, given[parameter.name]
            )
        return checked


def tool(
    function: ToolFunction, *, name: str | None = None, description: str | None = None
) -> Tool:
    """The tool of an async function whose parameters are typed `str`, `bool`, `list[str]`
    or one of those `| None`; its docstring describes it unless `description` does."""
    hints = typing.get_type_hints(function)
    parameters = []
    for parameter in inspect.signature(function).parameters.values():
        kind = hints[parameter.name]
        _type_schema(kind)  # a type relay cannot check is a mistake here, not at call time
        parameters.append(Parameter(parameter.name, kind, parameter.default))
    return Tool(
        name=name or function.__name__,
        description=description if description is not None else function.__doc__ or "",
        function=function,
        parameters=tuple(parameters),
    )


def _type_schema(kind: object) -> dict[str, object]:
    if kind is str:
        return {"type": "string"}
    if kind is bool:
        return {"type": "boolean"}
    if typing.get_origin(kind) is list and typing.get_args(kind) == (str,):
        return {"items": {"type": "string"}, "type": "array"}
    arguments = typing.get_args(kind)
    if isinstance(kind, types.UnionType) and len(arguments) == 2 and arguments[1] is type(None):
        return {"anyOf": [_type_schema(arguments[0]), {"type": "null"}]}
    raise TypeError(f"a tool parameter's type must be str, bool or list[str] (or | None): {kind}")


def _checked(name: str, kind: object, value: object) -> object:
    """`value` as the function takes it, or ArgumentError saying what `name` should be."""
    arguments = typing.get_args(kind)
    if isinstance(kind, types.UnionType):  # X | None
        if value is None:
            return None
        kind = arguments[0]
    if kind is str:
        if isinstance(value, str):
            return value
        raise ArgumentError(f"`{name}` must be text, not {_json_type(value)}")
    if isinstance(value, str):
        value = _from_json_text(value)
    if kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int | float) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.lower() in _TRUE_WORDS | _FALSE_WORDS:
            return value.lower() in _TRUE_WORDS
        raise ArgumentError(f"`{name}` must be true or false, not {_json_type(value)}")
    # list[str]
    if not isinstance(value, list):
        raise ArgumentError(f"`{name}` must be a list of text, not {_json_type(value)}")
    for index, entry in enumerate(value):
        if not isinstance(entry, str):
            raise ArgumentError(f"`{name}[{index}]` must be text, not {_json_type(entry)}")
    return value


def _from_json_text(value: str) -> object:
    """A list or flag some hosts send as JSON text (`"[\\"a\\"]"`, `"true"`), decoded;
    any other text as it is (as the SDK's pre-parse did)."""
    try:
        decoded = msgspec.json.decode(value)
    except (msgspec.DecodeError, ValueError, RecursionError):
        return value
    return (
        value
        if isinstance(decoded, str | int | float) and not isinstance(decoded, bool)
        else decoded
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "a list"
    return "an object"
