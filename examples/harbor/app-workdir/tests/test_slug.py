"""The checks of app-workdir: all cases must pass for reward 1."""

import sys

sys.path.insert(0, "/app")
sys.dont_write_bytecode = True

CASES = {
    "  Hello, World!  ": "hello-world",
    "Polar -- RL": "polar-rl",
    "a_b.c": "a-b-c",
    "2026 Q4 Report": "2026-q4-report",
    "already-a-slug": "already-a-slug",
    "!!!": "",
}


def main() -> None:
    try:
        from slug import slugify

        passed = all(slugify(text) == want for text, want in CASES.items())
    except Exception:  # noqa: BLE001 - any failure scores 0
        passed = False
    with open("/logs/verifier/reward.txt", "w") as out:
        out.write("1\n" if passed else "0\n")


if __name__ == "__main__":
    main()
