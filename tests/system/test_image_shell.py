"""`polar shell IMAGE` (docs/harnesses.md, "Try an image by hand") reaches the gateway as a
session does.

On a real Docker engine and the suite's stack (a gateway with a scripted model behind it):
`polar shell polar/runtime:py311 -- python3 -c ...`, run as a user runs it, starts the image
with no network but loopback, the session's variables and the channel at /run/polar; the
command's Chat Completions call to `$OPENAI_BASE_URL` (with the placeholder key) goes through
the channel and is recorded under the session the command named.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest

from polar.settings import Settings
from polar.storage import Storage
from tests.support.scripted_backend import text
from tests.support.scripted_stack import running_scripted_stack

pytestmark = pytest.mark.slow

ANSWER = "Tried by hand, recorded all the same."
ASK = (
    "import json, os, urllib.request as r\n"
    "print('interfaces', sorted(os.listdir('/sys/class/net')))\n"
    "print('key', os.environ['OPENAI_API_KEY'], 'instruction', os.environ['POLAR_INSTRUCTION'])\n"
    "body = {'model': os.environ['OPENAI_MODEL'], 'messages': [{'role': 'user', "
    "'content': os.environ['POLAR_INSTRUCTION']}]}\n"
    "req = r.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', "
    "json.dumps(body).encode(), {'Content-Type': 'application/json', "
    "'Authorization': 'Bearer ' + os.environ['OPENAI_API_KEY']})\n"
    "print('answer', json.load(r.urlopen(req, timeout=60))['choices'][0]['message']['content'])\n"
    # docs/harnesses.md's call from the shell: the gateway's model list
    "print('model', json.load(r.urlopen(os.environ['OPENAI_BASE_URL'] + '/models'))"
    "['data'][0]['id'])\n"
)


async def test_a_command_in_the_image_calls_the_gateway_through_a_session_channel(
    docker_image: str, devstack: object, base_settings: Settings, storage: Storage
) -> None:
    session_id = f"shell-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "app.cli", "shell", docker_image, "--session-id", session_id]
    argv += ["--instruction", "Say one line.", "--", "python3", "-c", ASK]
    async with running_scripted_stack(base_settings, [text(ANSWER)]) as stack:
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=os.environ | stack.env(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    stdout, stderr = out.decode(), err.decode()
    assert process.returncode == 0, f"{stdout}\n{stderr[-3000:]}"
    assert "interfaces ['lo']" in stdout  # --network none: loopback only
    assert "key polar-sealed-channel instruction Say one line." in stdout
    assert f"answer {ANSWER}" in stdout and "\nmodel " in stdout
    assert f"recorded under sessions/{session_id}/completions/" in stderr
    [record] = storage.list_completions(session_id)  # the channel named the session
    assert record.task_id == "shell"
    assert record.response["choices"][0]["message"]["content"] == ANSWER
