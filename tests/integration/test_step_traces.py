"""A multi-step session's traces: its steps' calls built as one run, so a chain is looked
for across the step boundary (tests/unit/polar/builders/test_builders_steps.py shows one
chain with a real tokenizer's template).

A `command` harness on the `local` runtime asks the scripted model once per step
(`$POLAR_STEP`, `$POLAR_INSTRUCTION`) through the session's gateway. One variant keeps the
conversation in its HOME (which is the session's across steps) and sends it whole with the
next step's instruction appended, as a harness resuming its session does; the other sends
each step's instruction alone, as a CLI started afresh does. The `prefix_merging` builder
reads every step's records in one build and compares the second step's prompt with the
first step's chain: resumed, the prompt carries the first answer (which the scripted model's
template re-renders, JSON-quoted: `response_retokenized`); afresh, it starts a new context.
Built apart, as runs are, the two would never have been compared at all (no break).
"""

from __future__ import annotations

import shlex
import uuid

import httpx
import pytest

from app.console import create_app
from polar.records import SessionStatus
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import TaskSpec
from tests.support.scripted_backend import text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack

ASK = (
    "import json, os, pathlib, urllib.request as r\n"
    "keep = pathlib.Path(os.environ['HOME']) / 'conversation.json'\n"
    "resume = os.environ['RESUME'] == '1' and keep.exists()\n"
    "messages = json.loads(keep.read_text()) if resume else []\n"
    "messages.append({'role': 'user', 'content': os.environ['POLAR_INSTRUCTION']})\n"
    "body = {'model': os.environ['OPENAI_MODEL'], 'messages': messages}\n"
    "req = r.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
    "json.dumps(body).encode(), {'Content-Type': 'application/json', "
    "'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
    "answer = json.load(r.urlopen(req, timeout=60))['choices'][0]['message']['content']\n"
    "messages.append({'role': 'assistant', 'content': answer})\n"
    "keep.write_text(json.dumps(messages))\n"
    "open(os.environ['POLAR_STEP'] + '.txt', 'w').write(answer + '\\n')\n"
)


async def _session_page(stack: ScriptedStack, session_id: str) -> str:
    settings = stack.settings.model_copy(update={"console_tokenizer_dir": None})
    app = create_app(settings, client=stack.polar.client, storage=stack.polar.storage)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        page = await client.get(f"/sessions/{session_id}")
    assert page.status_code == 200, page.text[:2000]
    return page.text


@pytest.mark.parametrize(
    ("resume", "why"), [(True, "response_retokenized"), (False, "new_context")]
)
async def test_a_steps_calls_are_chained_with_the_step_before(
    devstack: object, base_settings: Settings, storage: Storage, resume: bool, why: str
) -> None:
    steps = [
        {
            "name": name,
            "instruction": f"Say the word {name}.",
            "evaluator": {"kind": "command", "command": f"grep -q {name} {name}.txt"},
        }
        for name in ("alpha", "beta")
    ]
    spec = TaskSpec.model_validate(
        {
            "task_id": f"steptraces-{uuid.uuid4().hex[:6]}",
            "source": None,
            "runtime": {"kind": "local"},
            "harness": {
                "kind": "command",
                "command": f"python3 -c {shlex.quote(ASK)}",
                "env": {"RESUME": "1" if resume else "0"},
            },
            "builder": {"name": "prefix_merging"},
            "evaluator": {"kind": "command", "command": "true"},
            "steps": steps,
            "step_reward": "final",
            "timeouts": {"harness_s": 120, "heartbeat_s": 20, "max_attempts": 1},
        }
    )
    replies = [text("alpha it is."), text("beta it is.")]
    async with running_scripted_stack(base_settings, replies) as stack:
        result = await stack.polar.wait(await stack.polar.submit(spec), timeout_s=300)
        (session,) = result.sessions
        page = await _session_page(stack, session.session_id)
    # the console's session page shows each step's grade, and each step's report by its place
    assert page.count('class="task-step"') == 2 and "alpha" in page and "beta" in page
    assert "steps/alpha/command-report.json" in page and "steps/beta/command-report.json" in page
    assert session.status == SessionStatus.COMPLETED, session.error
    assert [(s.name, s.reward) for s in session.steps] == [("alpha", 1.0), ("beta", 1.0)]
    assert session.num_completions == 2  # both steps' calls, in one build
    assert session.trace_breaks == {why: 1}
    traces = storage.load_traces(session.traces_key or "")
    assert {t.reward for t in traces} == {1.0}
