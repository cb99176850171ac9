"""The gateway's body parser: every caller's body is an object within MAX_DEPTH, or a 400."""

from __future__ import annotations

import json
import math
import time

import pytest

from polar.providers import APIError
from proxy.request_json import MAX_DEPTH, depth_exceeds, parse_body, raw_depth_exceeds


def deep(levels: int, kind: str = "list") -> str:
    """A body whose value under "x" makes `levels` levels in all (the body is level 1)."""
    inner = "1"
    for _ in range(levels - 1):
        inner = f"[{inner}]" if kind == "list" else f'{{"k": {inner}}}'
    return f'{{"x": {inner}}}'


def refused(raw: bytes | str) -> APIError:
    with pytest.raises(APIError) as caught:
        parse_body(raw.encode() if isinstance(raw, str) else raw)
    assert caught.value.status_code == 400 and caught.value.code == "invalid_json"
    return caught.value


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_depth_up_to_the_limit_parses_and_one_more_is_refused(kind: str) -> None:
    assert parse_body(deep(MAX_DEPTH, kind).encode())["x"]
    assert "nests" in refused(deep(MAX_DEPTH + 1, kind)).message


@pytest.mark.parametrize("levels", [MAX_DEPTH + 1, 900, 1023, 1024, 1025, 5000, 200_000])
def test_any_deeper_body_is_a_400_never_a_recursion(levels: int) -> None:
    refused(deep(levels))
    refused(deep(levels).replace('"x": 1', '"x": NaN'))  # the standard library's path too
    refused("[" * levels + "]" * levels)


def test_brackets_inside_strings_and_escapes_do_not_count() -> None:
    text = json.dumps({"s": "[" * 500 + '\\"{' * 300, "t": '\\\\"[[[' * 100})
    assert not raw_depth_exceeds(text.encode())
    body = parse_body(json.dumps({"a": "[" * 5000, "b": [[{"c": "]]]" * 100}]]}).encode())
    assert body["a"] == "[" * 5000


def test_nan_infinity_and_big_numbers_are_still_accepted() -> None:
    body = parse_body(b'{"t": NaN, "u": Infinity, "v": -Infinity, "n": 1' + b"0" * 40 + b"}")
    assert math.isnan(body["t"]) and body["u"] == math.inf and body["n"] == 10**40
    assert parse_body(b'{"n": 18446744073709551616, "x": [NaN]}')["n"] == 2**64


@pytest.mark.parametrize(
    "raw",
    [
        '{"s": "\\ud800"}',
        '{"s": "ok \\udfff"}',
        '{"\\ud83d": 1}',
        '{"m": [{"content": "x\\ud83d"}], "t": NaN}',
    ],
)
def test_a_lone_surrogate_is_refused(raw: str) -> None:
    assert "surrogate" in refused(raw).message


def test_a_surrogate_pair_is_text() -> None:
    assert parse_body(b'{"s": "\\ud83d\\ude00"}')["s"] == "\U0001f600"


@pytest.mark.parametrize("raw", [b"[]", b"1", b'"x"', b"null", b"", b"{", b"\xff\xfe", b"{'a': 1}"])
def test_not_an_object_or_not_json_is_a_400(raw: bytes) -> None:
    refused(raw)


def test_depth_is_measured_without_recursion() -> None:
    value: object = 1
    for _ in range(100_000):
        value = [value]
    assert depth_exceeds(value) and not depth_exceeds([[1], {"a": [2]}], limit=3)


def test_a_large_shallow_body_costs_little() -> None:
    """A realistic agent body (hundreds of messages, tool schemas): measured in milliseconds."""
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "y" * 500}]},
        {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    ] * 300
    raw = json.dumps({"messages": messages, "tools": [{"parameters": {"a": {"b": {}}}}] * 50})
    started = time.perf_counter()
    for _ in range(10):
        parse_body(raw.encode())
    assert (time.perf_counter() - started) / 10 < 0.05
