"""The checks of app-workdir: all cases must pass for reward 1.

The module under test never runs in this process. It runs in a child process as `nobody`
(`CHILD`), which prints what slugify returned for each case; this process, root (the
verifier user is unset), judges those answers and alone writes /logs/verifier (root's):
code in slug.py can print anything, but it cannot write the reward (docs/harbor.md, "Who
writes the reward").
"""

import json
import subprocess

CASES = {
    "  Hello, World!  ": "hello-world",
    "Polar -- RL": "polar-rl",
    "a_b.c": "a-b-c",
    "2026 Q4 Report": "2026-q4-report",
    "already-a-slug": "already-a-slug",
    "!!!": "",
}

CHILD = """
import json, sys
sys.path.insert(0, "/app")
from slug import slugify
print(json.dumps([slugify(text) for text in json.loads(sys.argv[1])]))
"""
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}


def passed() -> bool:
    try:
        run = subprocess.run(
            [*AS_NOBODY, "python3", "-c", CHILD, json.dumps(list(CASES))],
            capture_output=True,
            text=True,
            env=ENV,
            cwd="/tmp",
            timeout=30,
        )
        lines = run.stdout.strip().splitlines()
        got = json.loads(lines[-1]) if run.returncode == 0 and lines else None
    except (subprocess.TimeoutExpired, ValueError):
        return False
    return got == list(CASES.values())


def main() -> None:
    with open("/logs/verifier/reward.txt", "w") as out:
        out.write("1\n" if passed() else "0\n")


if __name__ == "__main__":
    main()
