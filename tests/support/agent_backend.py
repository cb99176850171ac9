"""A scripted vLLM stand-in with real token ids that drives a coding agent through a task.

It answers `POST /v1/chat/completions` exactly as vLLM does with its hermes tool
parser: OpenAI `tool_calls` in the message, and, when asked, top-level
`prompt_token_ids`, `choices[0].token_ids` and `choices[0].logprobs.content[].logprob`.
The ids are real: the prompt is the tiny model's chat template applied to the
messages and tools (tool-call arguments parsed back to objects first, as vLLM
does), and the response is the tokenizer's encoding of the assistant turn as that
template renders it (`<tool_call>\\n{"name": ..., "arguments": ...}\\n</tool_call>`)
plus the `<|im_end|>` id when the turn ends normally.

What it answers follows a fixed plan over a `RepoTask`, chosen from the tools the
request offers (each harness names its tools differently): list the files, read
the buggy file, edit it, run the check, then a final text answer. The step is
the number of tool calls already in the conversation, so the backend keeps no
per-session state and a retried call gets the same answer. Calls without tools
(titles, summaries, memory extraction) are side calls and get a short text.
Every call is kept in `AgentBackend.calls`.

    with agent_backend(task, model_dir) as backend:
        ... backend.url (its /v1 base), backend.calls, backend.agent_calls
"""

from __future__ import annotations

import hashlib
import json
import shlex
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from .scripted_backend import serve_app, vllm_chat_answer

END_OF_TURN_TOKEN = "<|im_end|>"

# tool names by intent, in order of preference; each harness offers one of each (or none)
SHELL_TOOLS = ("exec_command", "shell_command", "shell", "Bash", "run_shell_command", "bash")
READ_TOOLS = ("Read", "read_file", "read")
EDIT_TOOLS = ("Edit", "edit", "replace")
PATH_PARAMS = ("file_path", "absolute_path", "path")


@dataclass(frozen=True)
class RepoTask:
    """A bug to fix in a workspace: replace `old` by `new` in `file`, then run `check`."""

    workspace: Path
    file: str
    old: str
    new: str
    check: str
    answer: str = "Done: fixed the bug and the check passes."

    @property
    def path(self) -> str:
        return str(self.workspace / self.file)

    @classmethod
    def from_texts(
        cls, workspace: Path, file: str, before: str, after: str, check: str
    ) -> RepoTask:
        """The edit that turns `before` into `after` (the file's two versions), as the smallest
        block of whole lines that differs: what an agent's edit tool would replace."""
        a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
        head = 0
        while head < min(len(a), len(b)) and a[head] == b[head]:
            head += 1
        tail = 0
        while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
            tail += 1
        old, new = "".join(a[head : len(a) - tail]), "".join(b[head : len(b) - tail])
        if not old or before.count(old) != 1:
            raise ValueError(f"no unique block of {file} to replace")
        return cls(workspace, file, old.rstrip("\n"), new.rstrip("\n"), check)


@dataclass
class BackendCall:
    """One call the backend answered."""

    request: dict[str, Any]
    response: dict[str, Any]
    status_code: int
    kind: str  # "agent" (offered tools) or "side" (no tools)
    step: str | None = None  # list | read | edit | check | answer
    tool: str | None = None  # the tool it called, if any
    arguments: dict[str, Any] | None = None

    @property
    def tool_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.request.get("messages") or [] if m.get("role") == "tool"]


def tool_name(tool: dict[str, Any]) -> str | None:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    name = fn.get("name")
    return name if isinstance(name, str) else None


def tool_params(tool: dict[str, Any]) -> dict[str, Any]:
    fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
    params = fn.get("parameters") or fn.get("input_schema") or {}
    return params.get("properties") or {} if isinstance(params, dict) else {}


def _pick(tools: dict[str, dict[str, Any]], names: tuple[str, ...]) -> str | None:
    return next((n for n in names if n in tools), None)


def _shell_args(props: dict[str, Any], command: str) -> dict[str, Any]:
    key = "cmd" if "cmd" in props else "command"
    if (props.get(key) or {}).get("type") == "array":
        return {key: ["bash", "-lc", command]}
    return {key: command}


def shell_call(tools: dict[str, dict[str, Any]], command: str) -> tuple[str, dict[str, Any]]:
    """(tool, arguments) running `command` with the offered shell tool (KeyError: none)."""
    shell = _pick(tools, SHELL_TOOLS)
    if shell is None:
        raise KeyError(f"no shell tool among {sorted(tools)}")
    return shell, _shell_args(tool_params(tools[shell]), command)


def plan_call(
    step: int, task: RepoTask, tools: dict[str, dict[str, Any]]
) -> tuple[str, str | None, dict[str, Any] | None]:
    """(step name, tool, arguments) for the `step`-th action; tool None = final answer."""
    shell = _pick(tools, SHELL_TOOLS)
    steps = ("list", "read", "edit", "check")
    if step >= len(steps) or shell is None and step in (0, 3):
        return "answer", None, None
    name = steps[step]
    if name == "list":
        return name, shell, _shell_args(tool_params(tools[shell]), "ls -la")
    if name == "check":
        return name, shell, _shell_args(tool_params(tools[shell]), task.check)
    if name == "read":
        read = _pick(tools, READ_TOOLS)
        if read is not None:
            props = tool_params(tools[read])
            key = next((k for k in PATH_PARAMS if k in props), "file_path")
            return name, read, {key: task.path}
        if shell is None:
            return "answer", None, None
        return name, shell, _shell_args(tool_params(tools[shell]), f"cat {shlex.quote(task.file)}")
    edit = _pick(tools, EDIT_TOOLS)
    if edit is not None:
        props = tool_params(tools[edit])
        if "edits" in props:  # Pi: {path, edits: [{oldText, newText}]}
            return (
                name,
                edit,
                {"path": task.path, "edits": [{"oldText": task.old, "newText": task.new}]},
            )
        if "old_string" in props:  # Claude Code, Qwen Code
            return (
                name,
                edit,
                {"file_path": task.path, "old_string": task.old, "new_string": task.new},
            )
    if shell is None:
        return "answer", None, None
    script = (
        f"import pathlib; p = pathlib.Path({task.file!r}); "
        f"p.write_text(p.read_text().replace({task.old!r}, {task.new!r}, 1))"
    )
    return name, shell, _shell_args(tool_params(tools[shell]), f"python3 -c {shlex.quote(script)}")


def _vllm_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as vLLM hands them to the template: tool-call arguments parsed to objects."""
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            m = dict(m)
            m["tool_calls"] = [dict(c) for c in calls]
            for c in m["tool_calls"]:
                fn = dict(c.get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    with suppress(ValueError):
                        fn["arguments"] = json.loads(fn["arguments"])
                c["function"] = fn
        out.append(m)
    return out


def tool_calls_so_far(messages: list[dict[str, Any]]) -> int:
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")


class AgentBackend:
    """The running backend: `url` (its /v1 base), the task it drives and every call it answered."""

    def __init__(self, task: RepoTask, model_dir: Path, model: str = "policy") -> None:
        from transformers import AutoTokenizer

        self.task = task
        self.model = model
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.end_id = self.tokenizer.convert_tokens_to_ids(END_OF_TURN_TOKEN)
        self.url = ""
        self.calls: list[BackendCall] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ views
    @property
    def agent_calls(self) -> list[BackendCall]:
        return [c for c in self.calls if c.kind == "agent"]

    @property
    def side_calls(self) -> list[BackendCall]:
        return [c for c in self.calls if c.kind == "side"]

    def steps(self) -> list[str]:
        return [c.step or "" for c in self.agent_calls]

    # ------------------------------------------------------------------ tokens
    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            _vllm_messages(messages),
            tools=tools or None,
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # ------------------------------------------------------------------ answer
    def plan(
        self, step: int, tools: dict[str, dict[str, Any]], messages: list[dict[str, Any]]
    ) -> tuple[str, str | None, dict[str, Any] | None]:
        """(step name, tool, arguments) of the `step`-th action (tool None: the final
        answer), given the offered tools and the conversation; by default the RepoTask's
        plan (`plan_call`)."""
        return plan_call(step, self.task, tools)

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, _error("messages must be a non-empty list")
        tools = body.get("tools") or []
        try:
            in_ids = self.prompt_ids(messages, tools)
        except Exception as exc:  # the template refused the conversation
            return 400, _error(f"chat template failed: {exc}")
        if tools:
            offered = {n: t for t in tools if (n := tool_name(t))}
            step, tool, args = self.plan(tool_calls_so_far(messages), offered, messages)
            kind = "agent"
        else:
            step, tool, args, kind = None, None, None, "side"
        content = self.task.answer if kind == "agent" else "Fix the bug"
        seed = hashlib.sha256(json.dumps(in_ids).encode()).hexdigest()
        answer = self.render(body, in_ids, None if tool else content, tool, args, seed)
        call = BackendCall(body, answer, 200, kind, step, tool, args)
        with self._lock:
            self.calls.append(call)
        return 200, answer

    def render(
        self,
        body: dict[str, Any],
        in_ids: list[int],
        content: str | None,
        tool: str | None,
        args: dict[str, Any] | None,
        seed: str,
    ) -> dict[str, Any]:
        """The chat.completion vLLM would return for this assistant turn."""
        calls = []
        generated = content or ""
        if tool is not None:
            arguments = json.dumps(args, ensure_ascii=False)
            generated += ("\n" if generated else "") + (
                f'<tool_call>\n{{"name": "{tool}", "arguments": {arguments}}}\n</tool_call>'
            )
            calls.append(
                {
                    "id": f"chatcmpl-tool-{seed[:32]}",
                    "type": "function",
                    "function": {"name": tool, "arguments": arguments},
                }
            )
        out_ids = self.encode(generated) + [self.end_id]
        finish = "tool_calls" if calls else "stop"
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(limit, int) and 0 < limit < len(out_ids):
            out_ids = out_ids[:limit]
            content, calls, finish = self.tokenizer.decode(out_ids), [], "length"
        pieces = [self.tokenizer.decode([t]) for t in out_ids]
        return vllm_chat_answer(
            body,
            content=content,
            tool_calls=calls,
            finish=finish,
            in_ids=in_ids,
            out_ids=out_ids,
            token_texts=pieces,
            token_bytes=[list(piece.encode()) for piece in pieces],
            answer_id=f"chatcmpl-{seed[32:64]}",
            model=self.model,
        )


def _error(message: str, code: int = 400) -> dict[str, Any]:
    return {"error": {"message": message, "type": "BadRequestError", "param": None, "code": code}}


def agent_backend_app(handle: AgentBackend) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse(_error("invalid JSON"), status_code=400)
        if not isinstance(body, dict):
            return JSONResponse(_error("body must be an object"), status_code=400)
        status, answer = handle.answer(body)
        return JSONResponse(answer, status_code=status)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": handle.model, "object": "model", "created": 0, "owned_by": "vllm"}],
        }

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


@contextmanager
def agent_backend(task: RepoTask, model_dir: Path, model: str = "policy") -> Iterator[AgentBackend]:
    """Run an agent backend for `task` in a uvicorn thread; `.url` is its /v1 base."""
    handle = AgentBackend(task, model_dir, model)
    with serve_app(agent_backend_app(handle)) as base:
        handle.url = f"{base}/v1"
        yield handle


__all__ = [
    "AgentBackend",
    "BackendCall",
    "RepoTask",
    "agent_backend",
    "agent_backend_app",
    "plan_call",
    "shell_call",
]
