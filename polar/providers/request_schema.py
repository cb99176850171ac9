"""Declarative request checks: required fields, JSON types and allowed values, worded per API.

A provider's request model (`request_models.py`) is a few `Fields` maps; `check` walks one
object against one map and raises the provider's own 400 for the first field that is missing,
of the wrong JSON type, or not one of its allowed values. Each API words it as its own server
does (`Dialect`): OpenAI's "Missing required parameter: 'x'." / "Invalid type for 'x': ...",
Anthropic's pydantic-style "x: Field required", Google's "Invalid value at 'x' (TYPE_...)".
It only reads types and values (no copies, no recursion), so it stays cheap on the hot path.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polar.providers.base import APIError

JSON_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}
ARTICLES = {"integer": "an integer", "object": "an object", "array": "an array", "null": "null"}
PYDANTIC_WORDS = {
    "string": "a valid string",
    "integer": "a valid integer",
    "number": "a valid number",
    "boolean": "a valid boolean",
    "object": "a valid dictionary",
    "array": "a valid list",
}
PROTO_TYPES = {
    "string": "TYPE_STRING",
    "boolean": "TYPE_BOOL",
    "integer": "TYPE_INT32",
    "number": "TYPE_FLOAT",
    "object": "TYPE_MESSAGE",
    "array": "TYPE_MESSAGE",
}
Path = Sequence[str | int]


def snake_case(name: str) -> str:
    """`topP` -> `top_p` (Google's field names in paths and in requests)."""
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def json_type(value: Any) -> str:
    """The JSON type name of a parsed JSON value ("integer" for ints, "number" for floats)."""
    return JSON_TYPES.get(type(value), "unknown")


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a request object: its accepted JSON types, whether it must be there, and
    the values it may take (strings only; empty: any), and the JSON type of each item of an
    array (None: any)."""

    kinds: frozenset[str]
    types: frozenset[type]
    """the Python types of the parsed JSON values it takes (from `kinds`)"""
    required: bool = False
    values: tuple[str, ...] = ()
    items: Field | None = None


class Model:
    """The fields of one request object, by name (keys not named are not looked at)."""

    __slots__ = ("fields", "required")

    def __init__(self, fields: Mapping[str, Field]) -> None:
        self.fields = dict(fields)
        self.required = tuple(name for name, spec in self.fields.items() if spec.required)

    def without(self, *names: str) -> Model:
        return Model({k: v for k, v in self.fields.items() if k not in names})


def field(
    *kinds: str, required: bool = False, values: Sequence[str] = (), items: str | None = None
) -> Field:
    """A `Field` of these JSON types ("number" also takes integers)."""
    types = {t for t, name in JSON_TYPES.items() if name in kinds}
    if "number" in kinds:
        types.add(int)
    each = field(items) if items is not None else None
    return Field(frozenset(kinds), frozenset(types), required, tuple(values), each)


OBJECT = field("object")


def optional(*kinds: str, items: str | None = None) -> Field:
    """An optional field of these JSON types, null allowed (as the APIs take it)."""
    return field(*kinds, "null", items=items)


def words(kinds: frozenset[str], vocabulary: Mapping[str, str] = ARTICLES) -> str:
    """The types a field takes, in words: "one of a string or an array"."""
    names = [vocabulary.get(k, f"a {k}") for k in sorted(kinds) if k != "null"]
    if len(names) == 1:
        return names[0]
    return "one of " + ", ".join(names[:-1]) + f" or {names[-1]}"


def _quoted(values: Sequence[str], last: str) -> str:
    quoted = [f"'{v}'" for v in values]
    return ", ".join(quoted[:-1]) + f"{last}{quoted[-1]}" if len(quoted) > 1 else quoted[0]


def _short(value: Any) -> str:
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


class Dialect:
    """How one API names a field's path and words the three refusals (OpenAI's by default)."""

    def path(self, path: Path) -> str:
        out = ""
        for part in path:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    def missing(self, path: Path) -> APIError:
        where = self.path(path)
        return APIError(
            400,
            f"Missing required parameter: '{where}'.",
            type="invalid_request_error",
            param=where,
            code="missing_required_parameter",
        )

    def wrong_type(self, path: Path, spec: Field, value: Any) -> APIError:
        where = self.path(path)
        got = ARTICLES.get(json_type(value), f"a {json_type(value)}")
        return APIError(
            400,
            f"Invalid type for '{where}': expected {words(spec.kinds)}, but got {got} instead.",
            type="invalid_request_error",
            param=where,
            code="invalid_type",
        )

    def bad_value(self, path: Path, spec: Field, value: Any) -> APIError:
        where = self.path(path)
        return APIError(
            400,
            f"Invalid value: {_short(value)}. Supported values are: "
            f"{_quoted(spec.values, ', and ')}.",
            type="invalid_request_error",
            param=where,
            code="invalid_value",
        )


class AnthropicDialect(Dialect):
    """Anthropic's API answers with pydantic's words and dotted paths (`messages.0.role`)."""

    def path(self, path: Path) -> str:
        return ".".join(str(p) for p in path)

    def missing(self, path: Path) -> APIError:
        return APIError(400, f"{self.path(path)}: Field required", param=self.path(path))

    def wrong_type(self, path: Path, spec: Field, value: Any) -> APIError:
        where = self.path(path)
        expected = words(spec.kinds, PYDANTIC_WORDS).removeprefix("one of ")
        return APIError(400, f"{where}: Input should be {expected}", param=where)

    def bad_value(self, path: Path, spec: Field, value: Any) -> APIError:
        return APIError(
            400,
            f"{self.path(path)}: Input should be {_quoted(spec.values, ' or ')}",
            param=self.path(path),
        )


class GoogleDialect(Dialect):
    """Google's API names fields in snake_case (`generation_config.temperature`)."""

    def path(self, path: Path) -> str:
        return super().path([p if isinstance(p, int) else snake_case(p) for p in path])

    def missing(self, path: Path) -> APIError:
        where = self.path(path)
        name = where.rsplit(".", 1)[-1]
        return APIError(
            400, f"* GenerateContentRequest.{where}: {name} is not specified", param=where
        )

    def wrong_type(self, path: Path, spec: Field, value: Any) -> APIError:
        where = self.path(path)
        proto = PROTO_TYPES.get(min(spec.kinds - {"null"}, default="string"), "TYPE_MESSAGE")
        return APIError(
            400,
            f"Invalid value at '{where}' ({proto}), {_short(value)}: expected {words(spec.kinds)}",
            param=where,
        )

    def bad_value(self, path: Path, spec: Field, value: Any) -> APIError:
        where = self.path(path)
        allowed = ", ".join(v for v in spec.values if v)
        return APIError(
            400,
            f"Invalid value at '{where}', {_short(value)}: use one of {allowed}",
            param=where,
        )


def check(value: Any, model: Model, dialect: Dialect, path: Path = ()) -> dict[str, Any]:
    """`value` if it is an object whose fields are all as `model` says; else the first
    refusal, in `dialect`'s words. Only the keys the object has are walked (few, mostly)."""
    if type(value) is not dict:
        raise dialect.wrong_type(path or ("body",), OBJECT, value)
    for name in model.required:
        if name not in value:
            raise dialect.missing((*path, name))
    fields = model.fields
    for name, item in value.items():
        spec = fields.get(name)
        if spec is None:
            continue
        if type(item) not in spec.types:
            raise dialect.wrong_type((*path, name), spec, item)
        if spec.values and type(item) is str and item not in spec.values:
            raise dialect.bad_value((*path, name), spec, item)
        if spec.items is not None and type(item) is list:
            each = spec.items
            for index, element in enumerate(item):
                if type(element) not in each.types:
                    raise dialect.wrong_type((*path, name, index), each, element)
    return value


class Tagged:
    """Objects told apart by one string field (a message's `role`, a part's `type`): one
    `Model` per allowed value, each with the tag's field and that kind's own fields."""

    __slots__ = ("tag", "models", "fallback")

    def __init__(
        self, tag: str, values: Sequence[str], fields: Mapping[str, Mapping[str, Field]]
    ) -> None:
        tag_field = field("string", required=True, values=values)
        self.tag = tag
        self.fallback = Model({tag: tag_field})
        self.models = {v: Model({tag: tag_field, **fields.get(v, {})}) for v in values}

    def check(self, value: Any, dialect: Dialect, path: Path) -> dict[str, Any]:
        """`value` checked against the model of its tag (its tag checked first)."""
        tag = value.get(self.tag) if type(value) is dict else None
        model = self.models.get(tag) if type(tag) is str else None
        if model is None:  # not an object, or no or an unknown tag: the refusal says which
            check(value, self.fallback, dialect, path)
            model = self.models[value[self.tag]]  # unreachable: the fallback refused it
        return check(value, model, dialect, path)
