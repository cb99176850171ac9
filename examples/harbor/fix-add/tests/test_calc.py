"""The checks of fix-add: each case is one component of the reward.

The module under test never runs in this process. It runs in a child process as `nobody`
(`CHILD`), which prints what each call returned; this process, root (the verifier user is
unset), judges those answers and alone writes /logs/verifier (root's): code in calc.py can
print anything, but it cannot write the reward (docs/harbor.md, "Who writes the reward").
"""

import json
import subprocess

CASES = {
    "add_small": ("add", [2, 3], 5),
    "add_negative": ("add", [-4, 1], -3),
    "add_float": ("add", [0.5, 0.25], 0.75),
    "mul_kept": ("mul", [3, 4], 12),
}

CHILD = """
import json, sys
sys.path.insert(0, "/workspace")
import calc
answers = {}
for name, (function, args) in json.loads(sys.argv[1]).items():
    try:
        answers[name] = getattr(calc, function)(*args)
    except Exception:
        answers[name] = None
print(json.dumps(answers))
"""
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1"}


def answers() -> dict:
    calls = json.dumps({name: [function, args] for name, (function, args, _) in CASES.items()})
    try:
        run = subprocess.run(
            [*AS_NOBODY, "python3", "-c", CHILD, calls],
            capture_output=True,
            text=True,
            env=ENV,
            cwd="/tmp",
            timeout=30,
        )
        lines = run.stdout.strip().splitlines()
        got = json.loads(lines[-1]) if run.returncode == 0 and lines else {}
    except (subprocess.TimeoutExpired, ValueError):
        got = {}
    return got if isinstance(got, dict) else {}


def correct(got: object, want: float) -> bool:
    return isinstance(got, int | float) and not isinstance(got, bool) and abs(got - want) < 1e-9


def main() -> None:
    got = answers()
    results = {
        name: 1.0 if correct(got.get(name), want) else 0.0 for name, (_, _, want) in CASES.items()
    }
    passed = sum(results.values())
    reward = 1.0 if passed == len(CASES) else 0.0
    with open("/logs/verifier/reward.json", "w") as out:
        json.dump({"reward": reward, "passed": passed, **results}, out)


if __name__ == "__main__":
    main()
