"""The four real harness CLIs from npm, each doing a real multi-turn run through the gateway.

Each test gives a CLI (Codex, Claude Code, Qwen Code, Pi; installed by
infra/harnesses/install.sh) a tiny git repo with a bug and a fresh HOME, has its
production adapter (activities/harnesses/) write its config there and point it
at an in-thread gateway with a freshly minted session key, and lets the agent
backend (real token ids from the tiny model's tokenizer, vLLM's answer shape)
walk it through: list files, read the buggy file, edit it, run the check,
answer. Then: the CLI exited 0 within its budget, the fix is in the file, the
harness fed every tool result back, every call is in S3 with prompt and response
token ids exactly as the backend produced them, and the CLI's process tree
connected to nothing but the gateway (every connect() traced with strace).

The fast tests at the end check the agent backend itself (its plan for each
harness's tool names, vLLM's answer shape, template-faithful token ids) and the
route probe that decides a skip.

Codex needs the gateway's `/v1/responses` and Claude Code its `/v1/messages`:
their tests skip, saying so, only while the gateway answers that route with 404.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from activities.harnesses import CLI_ADAPTERS, HarnessContext
from polar.records import CompletionRecord
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.storage import Storage
from polar.tasks.spec import HarnessSpec
from proxy.app import create_app
from tests.support.agent_backend import (
    AgentBackend,
    RepoTask,
    agent_backend,
    plan_call,
    tool_name,
)
from tests.support.connect_audit import foreign_connects, network_connects, traced
from tests.support.scripted_backend import logprob_of, serve_app

CLI_BUDGET_S = 240.0
PLAN = ["list", "read", "edit", "check", "answer"]
PROMPT = (
    "The add function in calc.py is broken and test_calc.py fails. "
    "Find the bug, fix it, and run the test."
)
BUGGY = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a - b\n'
TEST = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
README = "# calc\n\nA tiny calculator. Run `python3 test_calc.py` to test it.\n"


def make_repo(path: Path) -> RepoTask:
    """A git repo with one bug; the task says how to fix and check it."""
    path.mkdir(parents=True)
    (path / "calc.py").write_text(BUGGY)
    (path / "test_calc.py").write_text(TEST)
    (path / "README.md").write_text(README)
    git = ["git", "-c", "user.name=polar", "-c", "user.email=polar@localhost"]
    subprocess.run([*git, "init", "-q"], cwd=path, check=True)
    subprocess.run([*git, "add", "-A"], cwd=path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "calc"], cwd=path, check=True)
    return RepoTask(
        workspace=path,
        file="calc.py",
        old="return a - b",
        new="return a + b",
        check="python3 test_calc.py",
        answer="Fixed add() in calc.py: it subtracted instead of adding. test_calc.py passes.",
    )


@dataclass
class HarnessRun:
    harness: str
    session_id: str
    returncode: int
    elapsed_s: float
    stdout: str
    stderr: str
    task: RepoTask
    backend: AgentBackend
    records: list[CompletionRecord]
    gateway_port: int
    trace_file: Path | None

    def prefix_extensions(self) -> int:
        """How many calls' prompt ids extend the previous call's prompt + sampled ids exactly."""
        n = 0
        for prev, cur in zip(self.records, self.records[1:], strict=False):
            head = (prev.prompt_token_ids or []) + (prev.response_token_ids or [])
            n += (cur.prompt_token_ids or [])[: len(head)] == head
        return n

    def describe(self) -> str:
        tools = [c.tool for c in self.backend.agent_calls if c.tool]
        return (
            f"{self.harness}: rc={self.returncode} in {self.elapsed_s:.1f}s, "
            f"{len(self.backend.calls)} calls ({len(self.backend.side_calls)} side), "
            f"steps={self.backend.steps()}, tools={tools}, records={len(self.records)}, "
            f"token-prefix extensions {self.prefix_extensions()}/{max(len(self.records) - 1, 0)}"
        )

    def output(self) -> str:
        return f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-4000:]}"


@contextmanager
def gateway_for(
    base_settings: Settings, storage: Storage, upstream: str
) -> Iterator[tuple[str, Settings]]:
    settings = base_settings.model_copy(update={"upstream_urls": upstream})
    with serve_app(create_app(settings, storage)) as url:
        yield url, settings


def route_missing(gateway: str, route: str, key: str) -> bool:
    """True when the gateway answers `route` with 404 (the route does not exist yet)."""
    headers = {"Authorization": f"Bearer {key}", "anthropic-version": "2023-06-01"}
    answer = httpx.post(f"{gateway}{route}", json={}, headers=headers, timeout=30)
    return answer.status_code == 404


def run_cli(argv: list[str], cwd: Path, env: dict[str, str], budget_s: float) -> tuple:
    """Run a CLI in its own process group; on timeout the whole group is killed."""
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=budget_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"{argv[0]} ran past its {budget_s:.0f}s budget\n--- stdout\n{out[-3000:]}\n"
            f"--- stderr\n{err[-3000:]}"
        )
    return proc.returncode, time.monotonic() - started, out, err


def runtime_path() -> str:
    """A plain PATH with node on it, as a runtime gives (the CLI itself is called by path)."""
    node_dir = Path(shutil.which("node") or "/usr/bin/node").parent
    return os.pathsep.join(dict.fromkeys([str(node_dir), "/usr/local/bin", "/usr/bin", "/bin"]))


def run_harness(
    harness: str,
    tmp_path: Path,
    base_settings: Settings,
    storage: Storage,
    model_dir: Path,
) -> HarnessRun:
    info = CLI_ADAPTERS[harness]
    if info.installed_version(base_settings.harness_bin_dir) is None:
        pytest.skip(f"{info.package} is not installed: run infra/harnesses/install.sh")
    task = make_repo(tmp_path / "repo")
    identity = SessionIdentity(f"{harness}-{uuid.uuid4().hex[:12]}", "task-harness-clis")
    with (
        agent_backend(task, model_dir) as backend,
        gateway_for(base_settings, storage, backend.url) as (gateway, settings),
    ):
        key = mint_session_key(identity, settings.session_secret)
        probe_key = mint_session_key(
            SessionIdentity(f"probe-{uuid.uuid4().hex[:8]}", "probe"), settings.session_secret
        )
        if route_missing(gateway, info.route, probe_key):
            pytest.skip(
                f"the gateway has no {info.route} yet (404): {info.package} speaks only "
                f"{info.api} there"
            )
        ctx = HarnessContext(
            spec=HarnessSpec(kind=harness),
            instruction=PROMPT,
            gateway_url=gateway,
            api_key=key,
            session_id=identity.session_id,
            task_id=identity.task_id,
            bin_dir=settings.harness_bin_dir,
        )
        launch = info.prepare(tmp_path / "home", str(task.workspace), ctx)
        assert launch.argv is not None
        env = {"PATH": runtime_path(), "HOME": str(tmp_path / "home")} | launch.env
        trace_file = tmp_path / "connects.strace"
        argv = traced(launch.argv, trace_file)
        rc, elapsed, out, err = run_cli(argv or launch.argv, task.workspace, env, CLI_BUDGET_S)
    run = HarnessRun(
        harness=harness,
        session_id=identity.session_id,
        returncode=rc,
        elapsed_s=elapsed,
        stdout=out,
        stderr=err,
        task=task,
        backend=backend,
        records=storage.list_completions(identity.session_id),
        gateway_port=int(gateway.rsplit(":", 1)[1]),
        trace_file=trace_file if argv else None,
    )
    print(run.describe())
    return run


def text_of(content: Any) -> str:
    """A message content as text: a string, or the text of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(p.get("text") if isinstance(p, dict) else p) for p in content)
    return "" if content is None else str(content)


def assert_real_run(run: HarnessRun) -> None:
    """Everything a real multi-turn run through the gateway must show."""
    backend, task = run.backend, run.task
    assert run.returncode == 0, f"{run.describe()}\n{run.output()}"
    assert run.elapsed_s < CLI_BUDGET_S

    # the harness walked the whole plan with real tools, and the fix landed
    assert backend.steps() == PLAN, f"{run.describe()}\n{run.output()}"
    fixed = (task.workspace / task.file).read_text()
    assert task.new in fixed and task.old not in fixed, fixed
    check = subprocess.run(
        [sys.executable, "test_calc.py"], cwd=task.workspace, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr

    # every tool result came back to the model, in later turns
    final = backend.agent_calls[-1]
    results = [text_of(m.get("content")) for m in final.tool_messages]
    assert len(results) >= 4, final.request.get("messages")
    assert any("test_calc.py" in r for r in results), results  # the listing
    assert any(task.old in r for r in results), results  # the file as read before the edit
    assert any("ok" in r.split() for r in results), results  # the check's output
    for n, call in enumerate(backend.agent_calls):
        assert len(call.tool_messages) == n, (n, call.step, call.request.get("messages"))

    # every call went through the gateway and is in S3 with the backend's exact token data
    assert len(run.records) == len(backend.calls), run.describe()
    provider = CLI_ADAPTERS[run.harness].api
    for record in run.records:
        assert record.status_code == 200 and record.error is None, record.error
        assert record.provider == provider
        assert record.has_token_ids
        assert record.prompt_token_ids and record.response_token_ids
        assert record.response_logprobs is not None
        assert len(record.response_logprobs) == len(record.response_token_ids)

    def sampled(prompt: list[int], response: list[int]) -> tuple[tuple[int, ...], ...]:
        return tuple(prompt), tuple(response)

    recorded = Counter(sampled(r.prompt_token_ids, r.response_token_ids) for r in run.records)
    produced = Counter(
        sampled(c.response["prompt_token_ids"], c.response["choices"][0]["token_ids"])
        for c in backend.calls
    )
    assert recorded == produced
    tool_calls = [r for r in run.records if r.finish_reason == "tool_calls"]
    assert len(tool_calls) == len(PLAN) - 1

    # and the CLI talked to nothing but the gateway
    if run.trace_file is None:
        warnings.warn("strace cannot trace here: connect() audit skipped", stacklevel=2)
    else:
        assert network_connects(run.trace_file), "strace saw no connect() at all"
        foreign = foreign_connects(run.trace_file, run.gateway_port)
        assert not foreign, f"{run.harness} connected elsewhere than the gateway: {foreign}"


@pytest.mark.slow
@pytest.mark.parametrize("harness", ["qwen_code", "pi", "codex", "claude_code"])
def test_harness_cli_fixes_a_bug_through_the_gateway(
    harness: str,
    tmp_path: Path,
    base_settings: Settings,
    storage: Storage,
    model_dir: Path,
) -> None:
    run = run_harness(harness, tmp_path, base_settings, storage, model_dir)
    assert_real_run(run)


# --------------------------------------------------------------------------- the backend itself


def _fn(name: str, **props: str) -> dict[str, Any]:
    properties = {k: {"type": v} for k, v in props.items()}
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


# the tools each harness offers, as the gateway hands them upstream (Chat Completions shape)
TOOL_SETS: dict[str, list[dict[str, Any]]] = {
    "codex": [_fn("exec_command", cmd="string", workdir="string"), _fn("write_stdin")],
    "claude_code": [
        _fn("Bash", command="string"),
        _fn("Read", file_path="string"),
        _fn("Edit", file_path="string", old_string="string", new_string="string"),
        _fn("Write", file_path="string", content="string"),
    ],
    "qwen_code": [
        _fn("run_shell_command", command="string"),
        _fn("read_file", file_path="string"),
        _fn("edit", file_path="string", old_string="string", new_string="string"),
    ],
    "pi": [
        _fn("read", path="string"),
        _fn("bash", command="string"),
        _fn("edit", path="string", edits="array"),
    ],
}
EXPECTED_TOOLS = {
    "codex": ["exec_command"] * 4,
    "claude_code": ["Bash", "Read", "Edit", "Bash"],
    "qwen_code": ["run_shell_command", "read_file", "edit", "run_shell_command"],
    "pi": ["bash", "read", "edit", "bash"],
}


@pytest.mark.parametrize("harness", sorted(TOOL_SETS))
def test_agent_backend_plans_with_each_harness_tools(harness: str, tmp_path: Path) -> None:
    task = RepoTask(tmp_path, "calc.py", "return a - b", "return a + b", "python3 test_calc.py")
    offered = {tool_name(t): t for t in TOOL_SETS[harness]}
    plan = [plan_call(step, task, offered) for step in range(6)]
    assert [p[0] for p in plan] == [*PLAN, "answer"]
    assert [p[1] for p in plan[:4]] == EXPECTED_TOOLS[harness]
    edit_args = plan[2][2]
    assert edit_args is not None
    if harness == "pi":
        assert edit_args == {
            "path": task.path,
            "edits": [{"oldText": task.old, "newText": task.new}],
        }
    elif harness == "codex":  # no edit tool: the edit is a shell command, and it works
        (tmp_path / "calc.py").write_text(BUGGY)
        subprocess.run(["bash", "-c", edit_args["cmd"]], cwd=tmp_path, check=True)
        assert "return a + b" in (tmp_path / "calc.py").read_text()
    else:
        assert edit_args["old_string"] == task.old and edit_args["file_path"] == task.path


def test_agent_backend_answers_like_vllm_with_template_token_ids(
    tmp_path: Path, model_dir: Path
) -> None:
    task = RepoTask(tmp_path, "calc.py", "return a - b", "return a + b", "python3 test_calc.py")
    backend = AgentBackend(task, model_dir)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    tools = TOOL_SETS["qwen_code"]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": [{"type": "text", "text": PROMPT}]},
    ]
    rendered = list(messages)  # what vLLM templates: tool-call arguments parsed to objects
    training = {"logprobs": True, "top_logprobs": 0, "return_token_ids": True}
    answers = []
    for step in range(5):
        status, answer = backend.answer(
            {"model": "policy", "messages": messages, "tools": tools} | training
        )
        assert status == 200
        answers.append(answer)
        choice = answer["choices"][0]
        ids, prompt = choice["token_ids"], answer["prompt_token_ids"]
        assert prompt == list(
            tok.apply_chat_template(
                rendered, tools=tools, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        assert ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")
        assert [c["logprob"] for c in choice["logprobs"]["content"]] == [
            logprob_of(i, t) for i, t in enumerate(ids)
        ]
        assert answer["usage"]["completion_tokens"] == len(ids)
        message = choice["message"]
        if step < 4:
            assert choice["finish_reason"] == "tool_calls" and message["content"] is None
            (call,) = message["tool_calls"]
            args = json.loads(call["function"]["arguments"])
            assert tok.decode(ids[:-1]) == (
                f'<tool_call>\n{{"name": "{call["function"]["name"]}", "arguments": '
                f"{json.dumps(args)}}}\n</tool_call>"
            )
            compact = {
                **call,
                "function": {
                    **call["function"],
                    "arguments": json.dumps(args, separators=(",", ":")),
                },
            }
            result = {"role": "tool", "tool_call_id": call["id"], "content": f"result {step}"}
            # the harness echoes the arguments compactly (as Qwen Code and Pi do)
            messages += [{"role": "assistant", "content": None, "tool_calls": [compact]}, result]
            parsed = {**call, "function": {**call["function"], "arguments": args}}
            rendered += [{"role": "assistant", "content": None, "tool_calls": [parsed]}, result]
        else:
            assert choice["finish_reason"] == "stop" and message["tool_calls"] == []
            assert tok.decode(ids[:-1]) == message["content"] == task.answer
    # the template renders each sampled turn back exactly (arguments re-parsed, as vLLM does):
    # every prompt extends the previous prompt plus its sampled ids
    for prev, cur in zip(answers, answers[1:], strict=False):
        head = prev["prompt_token_ids"] + prev["choices"][0]["token_ids"]
        assert cur["prompt_token_ids"][: len(head)] == head
    assert [c.step for c in backend.calls] == PLAN

    # without tools it is a side call: a short text; without training fields, none come back
    status, side = backend.answer({"messages": [{"role": "user", "content": "Title?"}]})
    assert status == 200 and backend.calls[-1].kind == "side"
    assert side["prompt_token_ids"] is None and "token_ids" not in side["choices"][0]
    assert side["choices"][0]["logprobs"] is None


def test_route_probe_skips_only_on_a_missing_route() -> None:
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/v1/messages")
    async def messages() -> dict[str, str]:
        return {"type": "error"}

    with serve_app(app) as url:
        assert route_missing(url, "/v1/responses", "pk-x")
        assert not route_missing(url, "/v1/messages", "pk-x")
