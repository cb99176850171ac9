"""The console over real sessions: a scripted model behind the real gateway, a worker, the
suite's Temporal and S3. A task that passes and one whose harness fails are run, then the
console's tasks, task, session, call and trace pages are read through its ASGI app and
checked for what they show; the model's replies carry injection payloads, which the pages
show only escaped, and no page shows a secret of the stack's settings.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest
from temporalio.client import WorkflowExecutionStatus

from app.adversaries import NOOP_COMMAND
from app.console import create_app
from app.console.safety import CSP
from app.console.temporal_reads import TemporalReads
from app.task_audit import NOOP, AuditTarget, Probe, TaskAudit, audit_target
from polar.contracts import SessionResult, TaskResult
from polar.session_keys import SessionIdentity, mint_session_key
from polar.settings import Settings
from polar.tasks.spec import TaskSpec
from proxy.app import create_app as gateway_app
from tests.support.console_sessions import console_spec as spec
from tests.support.console_sessions import demo_repo, run_one
from tests.support.console_views import markup_is_the_consoles
from tests.support.ports import free_port
from tests.support.scripted_backend import serve_app, text
from tests.support.scripted_stack import ScriptedStack, running_scripted_stack
from workflows.queues import HostQueues, Queues

PAYLOAD = '<script>alert("polar")</script> "><img src=x onerror=alert(1)> </textarea>'
REPLIES = [text(f"Turn {i} of the haiku. {PAYLOAD}") for i in range(16)]
SECRET_FIELDS = ("s3_access_key", "s3_secret_key", "session_secret", "admin_token")
ADMIN_TOKEN = "admin-token-console-test-0123456789"
"""The console's settings hold the gateways' admin token (as a stack's do): never shown."""
HOSTILE_NAME = '"><img src=x onerror=alert(1)>.txt'
FAILING_AGENT = (
    'python agent.py; mkdir -p "$POLAR_ARTIFACTS_DIR"; '
    f"echo '<script>alert(3)</script>' > \"$POLAR_ARTIFACTS_DIR\"/'{HOSTILE_NAME}'; "
    "echo 'agent gave up' >&2; exit 3"
)


@dataclass
class Ran:
    stack: ScriptedStack
    ok: tuple[str, SessionResult]
    failed: tuple[str, SessionResult]
    group: tuple[str, TaskResult]


@pytest.fixture(scope="module")
async def ran(
    devstack: object, base_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Ran]:
    repo = demo_repo(tmp_path_factory.mktemp("console"))
    suffix = uuid.uuid4().hex[:6]
    async with running_scripted_stack(base_settings, REPLIES) as stack:
        ok = await run_one(stack, spec(f"console-ok-{suffix}", "python agent.py", repo))
        failed = await run_one(stack, spec(f"console-fail-{suffix}", FAILING_AGENT, repo))
        group = spec(f"console-group-{suffix}", "python agent.py", repo, num_sessions=2)
        run = await stack.polar.submit(group)
        yield Ran(stack, ok, failed, (run.workflow_id, await stack.polar.wait(run, timeout_s=180)))


@pytest.fixture
async def console(ran: Ran) -> AsyncIterator[httpx.AsyncClient]:
    update = {"console_tokenizer_dir": None, "admin_token": ADMIN_TOKEN}
    settings = ran.stack.settings.model_copy(update=update)
    app = create_app(settings, client=ran.stack.polar.client, storage=ran.stack.polar.storage)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://console") as client:
        yield client


def shown(ran: Ran, page: httpx.Response) -> str:
    """The page's HTML, checked: 200, the CSP, no secret and no payload unescaped."""
    assert page.status_code == 200, page.text[:2000]
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-content-type-options"] == "nosniff"
    html = page.text
    for name in SECRET_FIELDS:
        secret = ADMIN_TOKEN if name == "admin_token" else getattr(ran.stack.settings, name)
        assert secret and secret not in html, f"the page shows {name}"
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "</textarea>" not in html
    markup_is_the_consoles(str(page.url), html, ran.stack.settings.temporal_ui_base_url)
    return html


async def test_the_tasks_page_lists_both_tasks_newest_first(
    ran: Ran, console: httpx.AsyncClient
) -> None:
    (ok_wf, ok), (failed_wf, _) = ran.ok, ran.failed
    # this module's tasks among the suite's (others run beside it)
    html = shown(ran, await console.get("/", params={"task": "console-", "limit": 200}))
    assert ok_wf in html and failed_wf in html
    assert html.index(failed_wf) < html.index(ok_wf)  # the newer first
    prefix = shown(ran, await console.get("/", params={"task": ok.task_id[:-3]}))
    assert ok_wf in prefix and failed_wf not in prefix  # a task id's start finds it
    only = shown(ran, await console.get("/", params={"task": ok.task_id}))
    assert ok_wf in only and failed_wf not in only
    assert "1 / 1" in only and "1.000" in only  # sessions done of total, mean reward
    assert "ok 1" in only
    params = {"outcome": "policy_failure", "task": "console-", "limit": 200}
    failures = shown(ran, await console.get("/", params=params))
    assert failed_wf in failures and ok_wf not in failures
    by_runtime = shown(ran, await console.get("/", params={"task": ok.task_id, "runtime": "nope"}))
    assert ok_wf not in by_runtime
    refused = await console.get("/", params={"task": "x' OR 1=1"})
    assert refused.status_code == 400 and "x&#39; OR 1=1" not in refused.text


async def test_the_task_page_shows_its_sessions(ran: Ran, console: httpx.AsyncClient) -> None:
    (ok_wf, ok), (_, failed) = ran.ok, ran.failed
    html = shown(ran, await console.get(f"/tasks/{ok_wf}"))
    assert ok.session_id in html and "completed" in html and "1.000" in html
    assert 'id="reward-histogram"' in html
    html = shown(ran, await console.get(f"/tasks/{failed.task_id}"))  # by task id too
    assert failed.session_id in html and "harness_failed" in html and "policy_failure" in html
    assert (await console.get("/tasks/no-such-task")).status_code == 404


async def test_the_task_pages_show_pass_rates_and_the_audit_verdict(
    ran: Ran, console: httpx.AsyncClient
) -> None:
    (ok_wf, ok), (failed_wf, _) = ran.ok, ran.failed
    only = shown(ran, await console.get("/", params={"task": ok.task_id}))
    row = only[only.index(f'data-workflow="{ok_wf}"') :]
    assert '<td class="pass-1">1.000</td>' in row and '1.000 <span class="muted">k=1' in row
    failed = shown(ran, await console.get(f"/tasks/{failed_wf}"))
    facts = failed[failed.index('id="task-pass-1"') :][:300]
    # the harness failed after writing its answer: graded 1, the top, so it counts as correct
    assert 'id="task-pass-1">1.000 <span class="muted">1 of 1 scored' in facts, facts
    assert 'id="task-pass-k">1.000 <span class="muted">k = 1' in facts, facts
    assert 'id="no-audit"' in failed and 'id="task-audit"' not in failed

    # a real audit of the task (one probe: the no-op); its verdict goes to S3 by fingerprint
    execution = await ran.stack.polar.client.get_workflow_handle(ok_wf).describe()
    task = TaskSpec.model_validate(
        await TemporalReads(ran.stack.polar.client).start_input(execution)
    )
    target = AuditTarget(task, (Probe(NOOP, NOOP_COMMAND, "bottom"),), "console test")
    audit = await audit_target(ran.stack.polar, target, asyncio.Semaphore(1))
    assert audit.verdict == "sound" and audit.reasons  # the no-op scored 0; no oracle given
    for wf in (ok_wf, failed_wf):  # the same grading, another harness: the same verdict
        html = shown(ran, await console.get(f"/tasks/{wf}"))
        assert 'id="audit-verdict" class="verdict verdict-sound">sound<' in html
        assert "no-op (expects the bottom): 0.000 · as expected" in html
        assert "no oracle: the top reward is not shown reachable" in html
        assert f"/raw/audits/{audit.fingerprint}.json" in html
    raw = await console.get(f"/raw/audits/{audit.fingerprint}.json")
    assert TaskAudit.model_validate_json(raw.text).verdict == "sound"


async def test_sessions_of_a_group_side_by_side(ran: Ran, console: httpx.AsyncClient) -> None:
    workflow_id, result = ran.group
    first, second = sorted(result.sessions, key=lambda s: s.index)
    task = shown(ran, await console.get(f"/tasks/{workflow_id}"))
    assert f'href="/tasks/{workflow_id}/compare"' in task  # the whole group
    assert f'<input type="checkbox" name="session" value="{second.session_id}">' in task
    html = shown(ran, await console.get(f"/tasks/{workflow_id}/compare"))
    assert html.index(first.session_id) < html.index(second.session_id)
    assert html.count('<td class="reward">1.000</td>') == 2
    assert html.count('<td class="calls">2</td>') == 2
    assert html.count('<td class="patch-size">1 file, +') == 2  # answer.txt, each its own
    # each got other scripted replies: they part at the first answer
    assert '<td class="divergence">at call 0 (response)</td>' in html
    assert 'id="diverged-1"' in html and "Turn " in html.split('id="diverged-1"')[1]
    picked = {"session": [second.session_id, first.session_id]}  # the form's ticks, in order
    swapped = shown(ran, await console.get(f"/tasks/{workflow_id}/compare", params=picked))
    assert swapped.index(second.session_id) < swapped.index(first.session_id)
    for wrong in ([first.session_id], [first.session_id, ran.ok[1].session_id]):
        refused = await console.get(f"/tasks/{workflow_id}/compare", params={"session": wrong})
        assert refused.status_code == 400, refused.text
    assert (await console.get(f"/tasks/{ran.ok[0]}/compare")).status_code == 400  # one session


async def test_the_topology_shows_gateways_replicas_and_workers(ran: Ran) -> None:
    """A gateway of its own (model and admin listeners, the stack's backend its upstream) that
    served one call, one that does not answer, and the stack's worker on its queues."""
    stack = ran.stack
    gw_settings = stack.settings.model_copy(update={"upstream_urls": stack.backend.url})
    gateway = gateway_app(gw_settings)
    dead = f"http://127.0.0.1:{free_port()}"
    with serve_app(gateway) as model_url, serve_app(gateway.state.admin_app) as admin_url:
        stack.backend.push(text("a topology reply"))
        who = SessionIdentity(f"console-topology-{uuid.uuid4().hex[:6]}", "console-topology")
        key = mint_session_key(who, gw_settings.session_secret)
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(
                f"{model_url}/v1/chat/completions",
                json={"model": "policy", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {key}"},
            )
        assert answer.status_code == 200, answer.text
        update = {"admin_token": ADMIN_TOKEN, "console_gateways": f"{admin_url}, {dead}"}
        settings = stack.settings.model_copy(update=update)
        app = create_app(settings, client=stack.polar.client, storage=stack.polar.storage)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://console") as console:
            html = shown(ran, await console.get("/topology"))
    gateway_id = gateway.state.gateway.recorder.gateway_id
    assert f'{gateway_id} <span class="muted">admin {admin_url}</span>' in html
    replica = html[html.index('<tr class="replica up">') :][:400]
    assert stack.backend.url in replica and '<td class="served">1</td>' in replica, replica
    assert '<td class="share">100%</td>' in replica
    assert '<td class="in-flight">0</td>' in replica and "calls answered</dt><dd>1<" in html
    assert f"admin {dead}</span>" in html and "did not answer: ConnectError" in html
    queues = Queues.for_workflow_queue(stack.settings.task_queue).by_pool().values()
    for name in queues:  # the stack's worker serves each shared queue
        row = html[html.index(f'id="queue-{name}"') :][:300]
        assert '<td class="pollers">1</td>' in row, row
    host = stack.settings.host_id
    assert host in html.split('id="hosts">')[1][:200]
    row = html[
        html.index(f'id="queue-{HostQueues.for_host(stack.settings.task_queue, host).run}"') :
    ]
    assert '<td class="pollers">1</td>' in row[:300]
    assert '<nav id="pages">' in html and 'href="/topology"' in html


async def test_the_training_page_sums_tagged_tasks_per_policy_version(
    ran: Ran, console: httpx.AsyncClient, tmp_path: Path
) -> None:
    """Tasks tagged as a trainer bridge tags them (TaskSpec.policy_version): v7 one passing
    and one failing, v8 one passing and one cancelled while it runs (a dropped prefetch)."""
    polar, repo = ran.stack.polar, demo_repo(tmp_path)
    prefix = f"console-train-{uuid.uuid4().hex[:6]}"
    runs = [
        await polar.submit(spec(f"{prefix}-{name}", command, repo, policy_version=version))
        for name, command, version in (
            ("a", "python agent.py", 7),
            ("b", "true", 7),
            ("c", "python agent.py", 8),
            ("d", "sleep 120", 8),
        )
    ]
    results = [await polar.wait(run, timeout_s=180) for run in runs[:3]]
    await polar.cancel(runs[3])
    handle = polar.client.get_workflow_handle(runs[3].workflow_id)
    for _ in range(300):
        if (await handle.describe()).status != WorkflowExecutionStatus.RUNNING:
            break
        await asyncio.sleep(0.1)
    html = shown(ran, await console.get("/training", params={"task": prefix}))
    trained = [sum(s.num_response_tokens for s in r.sessions) for r in results]
    assert trained[0] > 0 and trained[1] == 0 and trained[2] > 0
    v7 = html[html.index('id="version-7"') :].split("</tr>")[0]
    assert '<td class="tasks">2</td><td class="sessions">2</td>' in v7, v7
    assert '<td class="reward">0.500</td>' in v7  # 1 and 0
    assert "ok 1</span>" in v7 and "policy_failure 1</span>" in v7
    assert '<td class="dropped">0 · 0</td>' in v7 and f'<td class="trained">{trained[0]}<' in v7
    v8 = html[html.index('id="version-8"') :].split("</tr>")[0]
    assert '<td class="tasks">2</td><td class="sessions">1</td>' in v8, v8
    assert '<td class="reward">1.000</td>' in v8 and '<td class="dropped">1 · 0</td>' in v8
    chart = html[html.index('id="reward-chart"') : html.index('id="outcome-chart"')]
    assert chart.count('class="bar v10"') == 1 and chart.count('class="bar v20"') == 1
    assert html.index('id="version-7"') < html.index('id="version-8"')
    assert "version-" not in shown(ran, await console.get("/training", params={"task": "x-none"}))


async def test_the_session_page_shows_calls_trace_grade_and_logs(
    ran: Ran, console: httpx.AsyncClient
) -> None:
    _, ok = ran.ok
    html = shown(ran, await console.get(f"/sessions/{ok.session_id}"))
    assert "Turn 0 of the haiku. &lt;script&gt;alert(" in html  # the reply, escaped
    assert html.count('class="call training-trained"') == ok.num_completions == 2
    assert "openai_chat" in html and "finish stop" in html
    assert "run_harness" in html and "build_trajectory" in html  # the stage timeline
    assert "evaluate.stdout" in html and "harness-attempt1.stdout" in html
    assert f"/sessions/{ok.session_id}/traces/0?file=per_request.jsonl" in html
    assert "http://127.0.0.1:" in html and "/namespaces/default/workflows/" in html
    first = ran.stack.polar.storage.list_completions(ok.session_id)[0].record_id
    assert f"/sessions/{ok.session_id}/calls/{first}" in html
    call = shown(ran, await console.get(f"/sessions/{ok.session_id}/calls/{first}"))
    assert "Request as normalised" in call and "Write a haiku about rollouts" in call
    # the replica that answered, and the weights: no sync has named a version to this gateway
    assert '<dd id="call-replica">http://127.0.0.1:' in call
    assert '<dd id="call-weights">not named' in call
    assert html.count('· replica <span class="replica">http://127.0.0.1:') == 2
    trace = shown(ran, await console.get(f"/sessions/{ok.session_id}/traces/0"))
    assert "no tokenizer available" in trace
    assert trace.count('class="tok trained') > 10 and 'class="tok prompt"' in trace
    assert "logprob -0." in trace
    every = shown(ran, await console.get(f"/sessions/{ok.session_id}/traces/0?tokens=all"))
    assert trace.count('class="tok prompt"') == 2  # the legend's and the prompt's one run
    assert every.count('class="tok prompt"') > 100  # each prompt token on its own


async def test_a_session_downloads_in_each_export_format(
    ran: Ran, console: httpx.AsyncClient
) -> None:
    _, ok = ran.ok
    html = shown(ran, await console.get(f"/sessions/{ok.session_id}"))
    traces = ran.stack.polar.load_traces(ok)
    for fmt in ("jsonl", "sft", "trl", "slime"):
        link = f"/sessions/{ok.session_id}/export/{fmt}?file=per_request.jsonl"
        assert link.replace("&", "&amp;") in html, fmt
        answer = await console.get(link)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-disposition"].startswith("attachment;")
        rows = [json.loads(line) for line in answer.text.splitlines() if line.strip()]
        assert rows, fmt
        if fmt == "jsonl":  # the RL rows: one per trace, the trace's own tokens
            assert [r["trace_id"] for r in rows] == [t.trace_id for t in traces]
            assert rows[0]["input_ids"] == traces[0].prompt_ids + traces[0].response_ids
    assert (await console.get(f"/sessions/{ok.session_id}/export/verl")).status_code == 404
    assert (await console.get(f"/sessions/{ok.session_id}/export/nope")).status_code == 404


async def test_the_failed_session_shows_why(ran: Ran, console: httpx.AsyncClient) -> None:
    _, failed = ran.failed
    html = shown(ran, await console.get(f"/sessions/{failed.session_id}"))
    assert "harness_failed" in html and "policy_failure" in html
    assert "agent gave up" in html  # the harness's stderr, inline
    escaped = HOSTILE_NAME.replace('"', "&#34;").replace("<", "&lt;").replace(">", "&gt;")
    assert escaped in html  # the artifact the harness named, as text
    key = f"sessions/{failed.session_id}/artifacts/harness-attempt1/artifacts/{HOSTILE_NAME}"
    raw = await console.get("/raw/" + quote(key))
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
    assert raw.text == "<script>alert(3)</script>\n"  # served as text, never HTML
    assert (await console.get("/sessions/..%2Fetc")).status_code == 404
    for call in ("nope", "..%2F..%2Fx"):
        assert (await console.get(f"/sessions/{failed.session_id}/calls/{call}")).status_code == 404


async def test_raw_objects_are_text_or_attachments(ran: Ran, console: httpx.AsyncClient) -> None:
    _, failed = ran.failed
    key = f"sessions/{failed.session_id}/artifacts/harness-attempt1.stderr"
    raw = await console.get(f"/raw/{key}")
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/plain")
    assert "agent gave up" in raw.text
    download = await console.get(f"/raw/{key}", params={"download": 1})
    assert download.headers["content-disposition"].startswith("attachment")
    assert (await console.get("/raw/polar-test/other")).status_code == 404
    records = await console.get(f"/raw/sessions/{failed.session_id}/completions/")
    assert records.status_code == 404


async def test_a_running_task_shows_its_live_progress(
    ran: Ran, console: httpx.AsyncClient, tmp_path: Path
) -> None:
    repo = demo_repo(tmp_path)
    task_id = f"console-live-{uuid.uuid4().hex[:6]}"
    run = await ran.stack.polar.submit(spec(task_id, "sleep 6; python agent.py", repo))
    try:
        for _ in range(100):  # until its session runs the harness
            status = await ran.stack.polar.status(run)
            if status.sessions and status.sessions[0].stage.value == "run":
                break
            await asyncio.sleep(0.1)
        (session,) = status.sessions
        row = shown(ran, await console.get("/", params={"task": task_id}))
        assert "status-running" in row and "0 / 1" in row  # live, from the progress query
        task = shown(ran, await console.get(f"/tasks/{run.workflow_id}"))
        assert session.session_id in task and "(run)" in task  # its stage, from visibility
        page = shown(ran, await console.get(f"/sessions/{session.session_id}"))
        summary = page[page.index('id="session-status"') :][:300]
        assert "running command harness" in summary and "state-running" in page, summary
    finally:
        await ran.stack.polar.wait(run, timeout_s=180)


async def test_a_record_that_does_not_decode_is_an_entry_that_says_so(ran: Ran) -> None:
    from app.console.session_objects import SessionObjects
    from polar.storage import completions_prefix

    storage = ran.stack.polar.storage
    sid = f"console-broken-{uuid.uuid4().hex[:6]}"
    storage.put_bytes(f"{completions_prefix(sid)}0001-gw-1.json.zst", b"\x28\xb5\x2f\xfdnot zstd")
    (record,) = await SessionObjects(storage).records(sid)
    assert record["record_id"] == "0001-gw-1.json.zst"
    assert "not a completion record" in record["error"]


async def test_a_session_temporal_no_longer_holds_shows_what_s3_holds(
    ran: Ran, console: httpx.AsyncClient
) -> None:
    """Past Temporal's retention its records, traces and logs are still in S3: the page
    shows them (here: a finished session's objects copied under an id no workflow has)."""
    storage = ran.stack.polar.storage
    _, ok = ran.ok
    old = f"console-retired-{uuid.uuid4().hex[:6]}"
    for key in storage.list_keys(f"sessions/{ok.session_id}/"):
        storage.put_bytes(key.replace(ok.session_id, old, 1), storage.get_bytes(key))
    html = shown(ran, await console.get(f"/sessions/{old}"))
    assert 'id="no-workflow"' in html and "Turn 0 of the haiku." in html
    assert 'id="session-status" class="status">completed' in html and "1.000" in html
    assert (await console.get(f"/sessions/{old}/traces/0")).status_code == 200
    assert (await console.get("/sessions/console-never-was")).status_code == 404
