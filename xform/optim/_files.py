"""Writing the readers' files."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(text: str, path: str | os.PathLike) -> None:
    """`text` into `path` through a temporary file beside it, renamed over `path` once
    complete: a failure or an interruption leaves no partial file."""
    path = Path(path)
    handle, temporary = tempfile.mkstemp(
        dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
