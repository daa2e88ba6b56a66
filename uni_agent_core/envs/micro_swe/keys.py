"""The secret that keys a micro-swe dataset (docs/architecture.md, "Tasks").

micro-swe tasks are generated from a seed by code that ships with agent-rl; were the seed all
there is, anyone who runs the generator — an agent inside its sandbox included — would get a
task's gold patch and hidden tests byte for byte. So every dataset is also keyed: the key mixes
into every random draw, and it is kept beside the dataset (`dataset.key`, mode 0600), where no
sandbox sees it. A new dataset takes this host's key (`<cache>/keys/micro-swe.key`, made once),
so one seed gives the same tasks on one host; copy a dataset's key (or the whole directory) to
reproduce it elsewhere.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from uni_agent_core.errors import UserError

KEY_FILE = "dataset.key"
"""The key's file in a dataset directory, beside `tasks.jsonl`."""
HOST_KEY_PATH = Path("keys") / "micro-swe.key"
"""This host's key, under the agent-rl cache."""
MIN_KEY_LENGTH = 32
"""Keys shorter than this many characters are refused (the made ones are 64 hex digits)."""


class DatasetKeyError(UserError, ValueError):
    """A key file is unreadable or too short to keep a dataset secret."""


def new_key() -> str:
    """A fresh random key (256 bits, hex)."""
    return secrets.token_hex(32)


def read_key(path: str | Path) -> str:
    """The key stored in `path` (surrounding whitespace dropped).

    Raises:
        DatasetKeyError: The file is missing, unreadable or holds a key that is too short.
    """
    try:
        key = Path(path).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise DatasetKeyError(f"cannot read the dataset key {path}: {error}") from error
    if len(key) < MIN_KEY_LENGTH:
        raise DatasetKeyError(
            f"the dataset key in {path} has {len(key)} characters; at least {MIN_KEY_LENGTH} "
            "keep a dataset from being regenerated"
        )
    return key


def write_key(path: str | Path, key: str) -> None:
    """Stores `key` at `path`, readable by its owner only."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(key + "\n")
    os.chmod(target, 0o600)


def host_key(cache: Path | None = None) -> str:
    """This host's key, made on first use."""
    from uni_agent_core.models.registry import cache_root

    path = (cache or cache_root()) / HOST_KEY_PATH
    if not path.exists():
        write_key(path, new_key())
    return read_key(path)


def dataset_key(directory: str | Path, cache: Path | None = None) -> str:
    """The key of the dataset in `directory`: its own when it has one, else this host's."""
    own = Path(directory) / KEY_FILE
    return read_key(own) if own.exists() else host_key(cache)
