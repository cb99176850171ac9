"""The harness's own user in a container (RuntimeSpec `harness_user`, Harbor's `[agent].user`).

Harbor runs its agent with `docker exec -u USER` (harbor/trial/trial.py `_run_agent_phase`,
the environment's `with_default_user`); so do the container runtimes here, for the harness's
run only: prepare actions, the baseline and the evaluator keep the image's user. The engine
resolves the name in the image's /etc/passwd, as it will for the harness's exec, so the check
at prepare asks the engine: Polar's own busybox (activities/runtimes/toolbox.py) runs as the
user and says its uid, or the exec fails and the task is refused naming the user. Before each
harness run the session's HOME and scratch (copied in owned by root) are given to that uid
with the same busybox, run as root; nothing of the image's runs for either.
"""

from __future__ import annotations

from typing import Any

from activities.runtimes import toolbox
from activities.runtimes.base import InvalidRuntime


def harness_uid(container: Any, user: str, image: str | None = None) -> str:
    """The uid the engine runs `user` as in `container`; InvalidRuntime (the task's error)
    where the image has no such user."""
    result = container.exec_run([toolbox.BUSYBOX, "id", "-u"], user=user)
    output = result.output.decode(errors="replace").strip()
    if result.exit_code != 0 or not output.isdigit():
        of = f"the image {image!r}" if image else "the session's image"
        raise InvalidRuntime(
            f"the harness user {user!r} (harness_user; Harbor's [agent].user) is not a user of "
            f"{of}: {output[-300:] or 'the engine could not run as it'}"
        )
    return output


def give_dirs(container: Any, uid: str, dirs: list[str]) -> None:
    """Make `uid` the owner of `dirs` and all in them (run as root, by the toolbox's busybox;
    `-h`: a link the last run left is given itself, never what it points at)."""
    result = container.exec_run([toolbox.BUSYBOX, "chown", "-hR", uid, "--", *dirs], user="0")
    if result.exit_code != 0:
        output = result.output.decode(errors="replace").strip()
        raise InvalidRuntime(f"giving the harness's dirs to uid {uid} failed: {output[-300:]}")
