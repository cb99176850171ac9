"""Polar's pytest runner: the test command's parent, which alone can sign what pytest reported.

The swebench evaluator copies this file into the evaluator runtime's scratch
folder with Polar's plugin (pytest_results.py) and a per-run random key, and
runs `python3 -I pytest_runner.py run DIR -- [NAME=VALUE ...] INTERPRETER
[ARGS]` in place of the instance's pytest command. The runner:

1. makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`): a process of the
   same user (the code under test, its children) can then neither read its
   memory nor open its fds through /proc, nor ptrace it;
2. reads the key from `DIR/key` and unlinks it, before anything else runs;
3. starts the interpreter on the plugin as a child (fork and exec: the key is
   not in the child's memory) with the write end of a pipe, by number on argv
   (never in the environment); the plugin makes it non-inheritable at once, so
   the tests' subprocesses do not get it;
4. collects the records the plugin streams over the pipe, takes the child's
   exit status from waitpid, and writes `DIR/results.json`: the records, the
   exit status, and an HMAC-SHA256 of them under the key. The worker verifies
   it; nothing of the code under test can make a valid one.

`probe DIR -- INTERPRETER` writes `DIR/importable.json`: the top-level module
names the interpreter can import from outside the workspace (the evaluator drops
patch files that would shadow them).

Standard library only; it must run on any Python >= 3.6 a repository's image has.
The runner exits with the child's exit status (128 + signal for a signal).
"""

import hashlib
import hmac
import json
import os
import select
import shutil
import subprocess
import sys
import time

MAX_RECORD_BYTES = 64 << 20  # more than this from the plugin: the run does not count
DRAIN_S = 2.0  # how long records are still read after the child exited

PROBE = r"""
import json, os, pkgutil, sys
ws = os.path.realpath(os.getcwd())
def outside(p):
    r = os.path.realpath(p or ".")
    return r != ws and not r.startswith(ws + os.sep)
paths = [p for p in sys.path[1:] if p and outside(p)]
names = set(sys.builtin_module_names) | set(getattr(sys, "stdlib_module_names", ()))
names.update(m[1] for m in pkgutil.iter_modules(paths))
for p in paths:
    try:
        entries = os.listdir(p)
    except OSError:
        continue
    for e in entries:
        if e.isidentifier() and os.path.isdir(os.path.join(p, e)):
            names.add(e)  # a namespace package
sys.stdout.write(json.dumps(sorted(names)))
"""


def non_dumpable():
    """PR_SET_DUMPABLE 0 through libc; whether it took (PR_GET_DUMPABLE reads 0 after it).
    The worker refuses results whose runner was not (swebench/grading.py's `verdict`)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE
            return False
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:  # noqa: BLE001 - no ctypes or no prctl: said so in the results
        return False


def interpreter(argv):
    """The argv that runs `argv[0]`'s Python: `pytest` (or `py.test`) is resolved through its
    script's shebang; a python name is kept."""
    head = argv[0]
    if os.path.basename(head) not in ("pytest", "py.test"):
        return [head]
    script = shutil.which(head)
    if script:
        try:
            with open(script, "rb") as f:
                line = f.readline().decode("utf-8", "replace").strip()
        except OSError:
            line = ""
        if line.startswith("#!") and "python" in line:
            return line[2:].split()
    return ["python"]


def split_env(argv):
    """(leading NAME=VALUE assignments, the rest)."""
    env = {}
    i = 0
    while i < len(argv) and "=" in argv[i] and argv[i].split("=", 1)[0].isidentifier():
        name, value = argv[i].split("=", 1)
        env[name] = value
        i += 1
    return env, argv[i:]


def collect(child, read_fd):
    """The plugin's bytes until the child exits (then what is left, briefly); (data, over)."""
    chunks, size, over = [], 0, False
    os.set_blocking(read_fd, False)
    deadline = None
    while True:
        if deadline is None and child.poll() is not None:
            deadline = time.monotonic() + DRAIN_S
        if deadline is not None and time.monotonic() > deadline:
            break
        ready, _, _ = select.select([read_fd], [], [], 0.2)
        if not ready:
            if deadline is not None:
                break  # nothing more after the exit
            continue
        try:
            chunk = os.read(read_fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:
            if deadline is None:
                child.wait()
            break
        size += len(chunk)
        if size > MAX_RECORD_BYTES:
            over = True
        else:
            chunks.append(chunk)
    return b"".join(chunks), over


def write_results(folder, key, body):
    """`results.json`: the body and its MAC, written afresh (an old entry is replaced)."""
    mac = hmac.new(key, body.encode("utf-8"), hashlib.sha256).hexdigest()
    path = os.path.join(folder, "results.json")
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as out:
        json.dump({"body": body, "mac": mac}, out)
    os.replace(tmp, path)


def run(folder, argv):
    dumpable_off = non_dumpable()
    key_path = os.path.join(folder, "key")
    with open(key_path, "rb") as f:
        key = f.read().strip()
    os.unlink(key_path)
    env_extra, command = split_env(argv)
    env = dict(os.environ)
    env.update(env_extra)
    args = command[1:]
    if os.path.basename(command[0]) not in ("pytest", "py.test"):
        args = args[2:]  # python -m pytest ARGS
    read_fd, write_fd = os.pipe()
    plugin = os.path.join(folder, "polar_pytest_results.py")
    child_argv = interpreter(command) + [plugin, str(write_fd), "--"] + args
    started = time.monotonic()
    try:
        child = subprocess.Popen(child_argv, env=env, pass_fds=(write_fd,))
    except OSError as exc:
        os.close(write_fd)
        body = {"error": f"cannot start {child_argv[0]!r}: {exc}", "returncode": 127}
        write_results(folder, key, json.dumps(body))
        return 127
    os.close(write_fd)
    data, over = collect(child, read_fd)
    code = child.wait()
    returncode = code if code >= 0 else 128 - code
    body = {
        "returncode": returncode,
        "signal": -code if code < 0 else None,
        "records": data.decode("utf-8", "replace"),
        "overflow": over,
        "non_dumpable": dumpable_off,
        "argv": child_argv,
        "duration_s": round(time.monotonic() - started, 3),
    }
    write_results(folder, key, json.dumps(body))
    return returncode


def probe(folder, argv):
    command = interpreter(argv) + ["-c", PROBE]
    try:
        out = subprocess.run(command, stdout=subprocess.PIPE, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        sys.stderr.write(f"polar: cannot list importable modules with {command!r}: {exc}\n")
        return 1
    with open(os.path.join(folder, "importable.json"), "wb") as f:
        f.write(out)
    return 0


def main():
    mode, folder, dash, *argv = sys.argv[1:]
    if dash != "--" or not argv:
        sys.stderr.write("usage: pytest_runner.py run|probe DIR -- COMMAND...\n")
        return 2
    return run(folder, argv) if mode == "run" else probe(folder, argv)


if __name__ == "__main__":
    sys.exit(main())
