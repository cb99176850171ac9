"""A call's JSON body, parsed so that no caller's bytes can make the gateway fail (a 5xx).

Whatever the caller sends, the body either parses into an object every later step
can walk, or the caller gets a 400 in its own shape (`invalid_json`):

* **Depth.** No body nests deeper than `MAX_DEPTH` arrays and objects. orjson parses
  without Python recursion and stops by itself at 1,024 levels; the depth of what
  it parsed is then measured level by level (no recursion, and only when the body
  has more than `MAX_DEPTH` brackets at all). A body orjson refuses (NaN, numbers
  past 64 bits, lone surrogates, or invalid JSON) is measured on its bytes before
  the standard library's parser, which recurses, ever sees it. The gateway's own
  walkers (canonical messages, schema normalisation, the record's encoder, the
  builders later) recurse, and ~900 levels used to end in a RecursionError: a 500
  marked as the gateway's fault, which turned a session the policy lost into
  `infra_error:gateway`.
* **Text.** A lone UTF-16 surrogate (`"\\ud800"`) has no UTF-8 form: the routing key,
  the upstream request and the record could not be written, and a tokenizer cannot
  take it either. It is refused, as Anthropic's own API refuses it ("no low surrogate in
  string").

NaN, infinities and numbers past a double or 64 bits are still accepted (the standard
library reads them) and left for the upstream to judge, as before.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import orjson

from polar.providers import APIError

MAX_DEPTH = 64
"""Most nested arrays and objects a request body may have (the body itself is level 1).
Real requests stay far below it (a tool's JSON schema nested 25 deep is ~55 levels of
the body); every recursive step after parsing stays far from Python's recursion limit."""
CODE = "invalid_json"
_SCAN_CHUNK = 1 << 16
_NOT_STRUCTURE = bytes(range(256)).translate(None, b'"[]{}')
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1


def too_deep() -> APIError:
    return APIError(
        400,
        f"the request body nests arrays and objects more than {MAX_DEPTH} levels deep, "
        "which this gateway does not accept",
        code=CODE,
    )


def depth_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether the parsed `value` nests more than `limit` arrays and objects (level by level,
    without recursion; stops at the first level past `limit`)."""
    level: list[Any] = [value] if type(value) in (dict, list) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below.extend([c for c in children if type(c) is dict or type(c) is list])
        level = below
    return False


def raw_depth_exceeds(raw: bytes, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text `raw` opens more than `limit` arrays and objects at once,
    read on its bytes (strings skipped), before any parser sees it; stops early."""
    if raw.count(b"[") + raw.count(b"{") <= limit:
        return False
    # escapes first (left to right, as a JSON reader pairs them): no quote is left escaped
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    brackets = b"".join(text.split(b'"')[::2])  # the parts outside strings
    depth = 0
    for start in range(0, len(brackets), _SCAN_CHUNK):
        chunk = brackets[start : start + _SCAN_CHUNK]
        steps = itertools.accumulate(map(_STEP.__getitem__, chunk), initial=depth)
        deepest = max(steps)
        if deepest > limit:
            return True
        depth += sum(map(_STEP.__getitem__, chunk))
    return False


def _lone_surrogate(value: Any) -> bool:
    """Whether any string of `value` (its keys too) holds a lone surrogate."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _lenient(raw: bytes) -> Any:
    """What orjson refused, read by the standard library (NaN, big numbers, surrogates)."""
    if raw_depth_exceeds(raw):
        raise too_deep()
    try:
        body = json.loads(raw)
    except RecursionError:  # cannot happen after the scan; a 400 all the same
        raise too_deep() from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(
            400, f"We could not parse the JSON body of your request: {exc}", code=CODE
        ) from exc
    if _lone_surrogate(body):
        raise APIError(
            400,
            "The request body is not valid JSON: a string holds a lone UTF-16 surrogate "
            "(an unpaired \\ud800-\\udfff escape), which is not text",
            code=CODE,
        )
    return body


def parse_body(raw: bytes) -> dict[str, Any]:
    """The JSON object `raw` holds; a 400 `APIError` (in the caller's shape at the edge) for
    anything else: invalid JSON, too deep, a lone surrogate, not an object."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "depth limit" in str(exc):  # past orjson's own 1,024 levels
            raise too_deep() from None
        body = _lenient(raw)
    else:
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth_exceeds(body):
            raise too_deep()
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object", code=CODE)
    return body
