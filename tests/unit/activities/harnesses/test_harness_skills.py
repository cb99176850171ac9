"""A task's skills dir reaches each harness where it reads skills (activities/harnesses/
skills.py): the CLIs get a copy line before their command, in their own folder; `command`
gets $POLAR_SKILLS_DIR. The copy line itself runs here, in bash."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from activities.harnesses import Launch
from activities.harnesses.skills import SKILLS_ENV, skills_copy
from tests.support.harness_launches import prepared_launch

FOLDERS = {
    "claude_code": "/h/.claude/skills",
    "codex": "/h/.agents/skills",
    "pi": "/h/.agents/skills",
    "qwen_code": "/h/.qwen/skills",
}


def _launch(kind: str, tmp_path: Path, skills_dir: str | None) -> Launch:
    return prepared_launch(kind, tmp_path / "home", skills_dir=skills_dir)


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_a_cli_copies_the_skills_into_its_own_folder_first(kind: str, tmp_path: Path) -> None:
    plain = _launch(kind, tmp_path, None)
    launch = _launch(kind, tmp_path, "/opt/skills")
    first, rest = launch.command.split("\n", 1)
    assert first == skills_copy("/opt/skills", FOLDERS[kind])
    assert rest == plain.command and plain.argv is not None and launch.argv is None
    assert SKILLS_ENV not in launch.env


def test_the_command_harness_is_told_the_dir(tmp_path: Path) -> None:
    launch = _launch("command", tmp_path, "/opt/skills")
    assert launch.command == "run" and launch.env[SKILLS_ENV] == "/opt/skills"
    assert SKILLS_ENV not in _launch("command", tmp_path, None).env


def test_the_copy_line_copies_the_contents_and_says_when_it_cannot(tmp_path: Path) -> None:
    skills = tmp_path / "skills with space"
    (skills / "one").mkdir(parents=True)
    (skills / "one" / "SKILL.md").write_text("---\nname: one\n---\n")
    folder = tmp_path / "home" / ".agents" / "skills"
    done = subprocess.run(
        ["bash", "-c", skills_copy(str(skills), str(folder)) + "\necho ran"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert (folder / "one" / "SKILL.md").read_text() == "---\nname: one\n---\n"
    assert done.stdout == "ran\n" and done.stderr == ""
    missing = subprocess.run(
        ["bash", "-c", skills_copy(str(tmp_path / "nope"), str(folder)) + "\necho ran"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert missing.stdout == "ran\n" and "is not a directory in the runtime" in missing.stderr
