"""Files the CLI and the dev stack read besides Polar's modules, in a checkout or an install.

A checkout keeps them where the repository does (`infra/images/`,
`infra/tiny_model/`, `examples/demo/`). A wheel (`pip install .`) carries copies
as data files under `{prefix}/share/polar/` (pyproject.toml's
`[tool.setuptools.data-files]`), found through the installed distribution's
file list. Paths that only a checkout has (the venvs `infra/setup.sh` makes,
the harness CLIs from npm) are settings (polar/settings/), not assets.
"""

from __future__ import annotations

import importlib.metadata
from functools import lru_cache
from pathlib import Path
from typing import Literal

DISTRIBUTION = "polar-rollout"

AssetName = Literal["images", "tiny_model", "demo"]

CHECKOUT_DIRS: dict[AssetName, str] = {
    "images": "infra/images",  # build.py and the Dockerfiles of the local images
    "tiny_model": "infra/tiny_model",  # build_tiny_model.py (the dev model)
    "demo": "examples/demo",  # the demo task and its agent repo
}
"""Where each asset lives in a checkout; an install has it at `share/polar/{name}`."""


class AssetMissing(RuntimeError):
    """An asset is neither in a checkout nor in the installed package's data files."""


@lru_cache(maxsize=1)
def checkout_root() -> Path | None:
    """The repository this `polar` package is imported from, or None for an installed wheel."""
    root = Path(__file__).resolve().parent.parent
    pyproject = root / "pyproject.toml"
    ours = f'name = "{DISTRIBUTION}"'
    if (root / "infra").is_dir() and pyproject.is_file() and ours in pyproject.read_text():
        return root
    return None


def _installed(name: AssetName) -> Path | None:
    """`share/polar/{name}` of the installed distribution, when it carries that asset."""
    try:
        dist = importlib.metadata.distribution(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None
    marker = f"share/polar/{name}/"
    for file in dist.files or ():
        text = file.as_posix()
        if marker in text:
            path = Path(str(dist.locate_file(file))).resolve()
            depth = text[text.index(marker) + len(marker) :].count("/") + 1
            return path.parents[depth - 1]
    return None


def asset_dir(name: AssetName) -> Path:
    """The directory of asset `name`: the checkout's own, else the installed copy."""
    root = checkout_root()
    if root is not None and (root / CHECKOUT_DIRS[name]).is_dir():
        return root / CHECKOUT_DIRS[name]
    installed = _installed(name)
    if installed is not None and installed.is_dir():
        return installed
    raise AssetMissing(
        f"{name}: not in a checkout ({CHECKOUT_DIRS[name]}) nor in the installed "
        f"{DISTRIBUTION}'s data files (share/polar/{name}); reinstall it with `pip install`"
    )
