"""Where rlmd keeps its state: one folder, ``$RLMD_HOME`` or the platform's user data folder.

Layout under the home folder:
    config.toml        user-level configuration (models, run defaults)
    rlmd.db            the trajectory store (SQLite, WAL)
    models/            pulled local GGUF models, named with their SHA-256
    run/               sockets and pid files (the daemon)
"""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

PROJECT_CONFIG_NAMES = (".rlmd.toml", "rlmd.toml")
"""Project-level config files, looked up in the project folder; they override the user's."""


def home() -> Path:
    """The rlmd home folder (created if missing): ``$RLMD_HOME`` if set, else
    ``platformdirs.user_data_dir("rlmd")``."""
    env = os.environ.get("RLMD_HOME")
    path = Path(env).expanduser() if env else Path(platformdirs.user_data_dir("rlmd"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def store_path() -> Path:
    """The trajectory database file."""
    return home() / "rlmd.db"


def user_config_path() -> Path:
    return home() / "config.toml"


def models_dir() -> Path:
    path = home() / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def project_config_path(project: Path) -> Path | None:
    """The first project config file found in ``project``, else ``None``."""
    for name in PROJECT_CONFIG_NAMES:
        candidate = project / name
        if candidate.is_file():
            return candidate
    return None
