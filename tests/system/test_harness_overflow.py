"""Real harness CLIs meeting a context overflow through the gateway.

The agent backend answers like vLLM until the conversation holds two tool calls
(the agent has listed the files and read the buggy one); from then on every call
with tools gets vLLM's 400 "maximum context length is 4096 tokens". The gateway
turns that into each provider's own error, and each CLI reacts as it does
against its real provider: Codex ends the turn with its "ran out of room in the
model's context window" error, Claude Code runs its automatic compaction on
"prompt is too long" (which then fails: the scripted backend answers the
summarising call with a tool call, not a summary), and Pi starts a compaction
for the overflow. None of them retries the same overflowing call in a loop.

Checked against the gateway with its overflow translation switched off (vLLM's
400 passed on with no code): Codex then does not recognise the overflow and
this test fails for it; Claude Code and Pi also recognise vLLM's own message,
so for them the test shows the reaction, not the translation.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from activities.harnesses import CLI_ADAPTERS, HarnessContext
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec
from tests.support.agent_backend import (
    AgentBackend,
    BackendCall,
    agent_backend_app,
    tool_calls_so_far,
)
from tests.support.scripted_backend import serve_app
from tests.system.test_harness_clis import PROMPT, gateway_for, make_repo, run_cli, runtime_path

pytestmark = pytest.mark.slow

LIMIT = 4096


class OverflowingBackend(AgentBackend):
    """The agent backend, with a context that overflows once two tools have been called."""

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages") or []
        if body.get("tools") and tool_calls_so_far(messages) >= 2:
            tokens = LIMIT + 1000 * tool_calls_so_far(messages)
            message = (  # vLLM's words (vllm/renderers/params.py)
                f"This model's maximum context length is {LIMIT} tokens. However, your prompt "
                f"contains {tokens} input tokens, which exceeds this limit even without any "
                "output tokens. Please reduce the length of the input prompt."
            )
            error = {"message": message, "type": "BadRequestError", "param": "input_tokens"}
            answer = {"error": error | {"code": 400}}
            with self._lock:
                self.calls.append(BackendCall(body, answer, 400, "overflow"))
            return 400, answer
        return super().answer(body)


@pytest.mark.parametrize("harness", ["codex", "claude_code", "pi"])
def test_a_cli_reacts_to_the_overflow_as_with_its_provider(
    harness: str, tmp_path: Path, base_settings: Settings, storage: Storage, model_dir: Path
) -> None:
    info = CLI_ADAPTERS[harness]
    if info.installed_version(base_settings.harness_bin_dir) is None:
        pytest.skip(f"{info.package} is not installed: run infra/harnesses/install.sh")
    task = make_repo(tmp_path / "repo")
    identity = SessionIdentity(f"{harness}-{uuid.uuid4().hex[:12]}", "task-overflow")
    backend = OverflowingBackend(task, model_dir)
    with serve_app(agent_backend_app(backend)) as base:
        backend.url = f"{base}/v1"
        with gateway_for(base_settings, storage, backend.url) as (gateway, settings):
            ctx = HarnessContext(
                spec=HarnessSpec(kind=harness),
                instruction=PROMPT,
                gateway_url=gateway,
                api_key=mint_session_key(identity, settings.session_secret),
                session_id=identity.session_id,
                task_id=identity.task_id,
                bin_dir=settings.harness_bin_dir,
            )
            launch = info.prepare(tmp_path / "home", str(task.workspace), ctx)
            assert launch.argv is not None
            env = {"PATH": runtime_path(), "HOME": str(tmp_path / "home")} | launch.env
            rc, _, out, err = run_cli(launch.argv, task.workspace, env, 240)
    records = storage.list_completions(identity.session_id)
    overflows = [c for c in backend.calls if c.kind == "overflow"]
    after = backend.calls[backend.calls.index(overflows[0]) + 1 :] if overflows else []
    said = f"rc={rc}\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    assert overflows, said
    # every overflow is a failed record, never a trained one
    failed = [r for r in records if r.status_code == 400]
    assert len(failed) == len(overflows) and all(not r.has_token_ids for r in failed)
    assert all("maximum context length is 4096" in (r.error or "") for r in failed)
    if harness == "codex":  # its ContextWindowExceeded: the turn ends, no retry
        assert "ran out of room in the model's context window" in err, said
        assert len(overflows) == 1 and rc != 0, said
    elif harness == "claude_code":  # "prompt is too long": its automatic compaction runs
        assert '"terminal_reason":"prompt_too_long"' in out, said
        assert "Prompt is too long · automatic compaction" in out, said
        # the summarising call went out after the overflow; the scripted backend answers
        # it with its next tool call, not a summary, so the compaction itself fails here
        assert after and after[0].kind != "overflow", said
        assert len(overflows) == 1, said
    else:  # pi: a compaction for the overflow, then it goes on
        assert '"type":"compaction_start","reason":"overflow"' in out, said
        assert after and after[0].kind != "overflow", said
