"""The checks of fix-add: each case is one component of the reward."""

import json
import sys

sys.path.insert(0, "/workspace")
sys.dont_write_bytecode = True

CASES = {
    "add_small": lambda c: c.add(2, 3) == 5,
    "add_negative": lambda c: c.add(-4, 1) == -3,
    "add_float": lambda c: abs(c.add(0.5, 0.25) - 0.75) < 1e-9,
    "mul_kept": lambda c: c.mul(3, 4) == 12,
}


def main() -> None:
    try:
        import calc
    except Exception:  # noqa: BLE001 - any import failure scores 0
        results = {name: 0.0 for name in CASES}
    else:
        results = {}
        for name, check in CASES.items():
            try:
                results[name] = 1.0 if check(calc) else 0.0
            except Exception:  # noqa: BLE001
                results[name] = 0.0
    passed = sum(results.values())
    reward = 1.0 if passed == len(CASES) else 0.0
    with open("/logs/verifier/reward.json", "w") as out:
        json.dump({"reward": reward, "passed": passed, **results}, out)


if __name__ == "__main__":
    main()
