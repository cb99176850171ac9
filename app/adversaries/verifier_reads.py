"""The `plant-reads` adversary: plant, with passing contents, the files a verifier reads.

A verifier that trusts a file the agent can write (a status marker, a results file its tests
read instead of recomputing) scores an agent that only wrote that file. The agent cannot see
the tests, but the audit can: it reads the task's tests (`tests/`: test.sh and what it runs)
on the trusted side, finds the paths they name inside the task's workdir, and hands them to
this adversary, which writes each with the passing word the tests themselves use (`PASS`,
`ok`, `done`, `true`, `1`, ...; `PASS` where they name none), a JSON file as an object saying
so under the usual keys.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath

from polar.tasks.harbor_verifier import verifier_files

NAME = "plant-reads"
DESCRIPTION = (
    "write the files the verifier's tests read inside the workdir (markers, results files) "
    "with the passing word the tests use"
)

_PATH = re.compile(r"(?<![\w$.{/-])(/?(?:[\w.-]+/)*[\w.-]*[A-Za-z0-9_][\w.-]*)")
_WORDS = (
    "PASS",
    "PASSED",
    "pass",
    "passed",
    "SUCCESS",
    "success",
    "OK",
    "ok",
    "DONE",
    "done",
    "true",
    "True",
    "complete",
    "completed",
    "1",
)
_STRING = re.compile(r""""([^"\n]*)"|'([^'\n]*)'""")
_NEVER = ("/tests", "/logs", "/solution", "/proc", "/sys", "/dev", "/usr", "/etc", "/bin")
_SOURCE_SUFFIXES = {".sh", ".py", ".bash", ".js", ".ts", ".rb", ".pl"}
MAX_PATHS = 32


def _inside(candidate: str, workdir: PurePosixPath, test_names: set[str]) -> str | None:
    """`candidate` as a path relative to the workdir, if it names a file there."""
    if "//" in candidate or candidate.endswith("/") or ".." in candidate.split("/"):
        return None
    path = PurePosixPath(candidate)
    if path.is_absolute():
        if path == workdir or not path.is_relative_to(workdir):
            return None
        rel = path.relative_to(workdir)
    else:
        if ("/" not in candidate and not path.suffix) or candidate.startswith(("-", ".")):
            return None  # a bare word (a command, a flag), not a file
        rel = path
    if rel.name in test_names or rel.suffix in _SOURCE_SUFFIXES:
        return None  # the tests' own files, or code the agent is meant to write
    if f"/{rel}".startswith(_NEVER):
        return None
    if not re.search(r"[A-Za-z]", rel.name) or rel.suffix.lstrip(".").isdigit():
        return None  # a version number, not a file
    return str(rel)


def _segments(rel: str, text: str) -> list[str]:
    """The parts of a test file that may name a file: a shell script's code (its comments
    and URLs left out), another file's string literals."""
    shell = rel.endswith((".sh", ".bash")) or (text.startswith("#!") and "sh" in text[:40])
    out = []
    for line in text.splitlines():
        code = "" if line.lstrip().startswith("#") else line
        code = re.sub(r"\w+://\S+", " ", code.split(" #", 1)[0] if shell else code)
        if shell:
            out.append(code)
        else:
            out += [a or b for a, b in _STRING.findall(code)]
    return out


def verifier_read_paths(tests_dir: Path, workdir: str) -> list[str]:
    """Paths inside `workdir` the tests name (relative to it), in the order first named."""
    files = verifier_files(tests_dir)
    names = {PurePosixPath(rel).name for rel, _ in files}
    root = PurePosixPath(workdir)
    found: dict[str, None] = {}
    for rel, text in files:
        for segment in _segments(rel, text):
            for match in _PATH.finditer(segment):
                inside = _inside(match.group(1), root, names)
                if inside is not None:
                    found.setdefault(inside)
    return list(found)[:MAX_PATHS]


def passing_word(tests_dir: Path) -> str:
    """The passing word the tests compare with (the first of `_WORDS` found quoted in them,
    else the first found as a word), `PASS` where they use none."""
    texts = [text for _, text in verifier_files(tests_dir)]
    quoted = {(a or b).strip() for t in texts for a, b in _STRING.findall(t)}
    for word in _WORDS:
        if word in quoted:
            return word
    words = {w for t in texts for w in re.findall(r"[A-Za-z0-9]+", t)}
    return next((w for w in _WORDS if w in words and not w.isdigit()), "PASS")


def plant_contents(rel: str, word: str) -> str:
    """What is written to `rel`: the word, or a JSON object saying it under the usual keys."""
    if rel.endswith(".json"):
        value: object = True if word.lower() == "true" else word
        keys = ("status", "result", "passed", "success", "ok", "done")
        return json.dumps({k: value for k in keys}) + "\n"
    return word + "\n"


def plant_reads_command(paths: list[str], word: str) -> str:
    """The harness command writing each path (relative to the workspace) with its contents."""
    lines = []
    for rel in paths:
        quoted = shlex.quote(rel)
        lines.append(f'mkdir -p "$(dirname {quoted})" 2>/dev/null')
        lines.append(f"printf '%s' {shlex.quote(plant_contents(rel, word))} > {quoted} 2>/dev/null")
    lines.append("true")
    return "\n".join(lines) + "\n"
