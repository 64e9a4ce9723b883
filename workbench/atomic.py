"""Atomic file writes: a temp file in the same folder, fsync, rename. Readers see old or new, never half.

An interrupted run (Ctrl-C, a crash, a full disk) must not leave a truncated result.json or report
behind, so every output file goes through here. The temp file lives in the target's folder because
`os.replace` is only atomic within one file system.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _file_mode() -> int:
    """The mode `open()` would give a new file (0o666 less the umask); mkstemp's own is 0o600."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


FILE_MODE = _file_mode()


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Replace `path` with `data` in one step, creating the parent folder; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)
    return path


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_text(path: Path, text: str) -> Path:
    """`atomic_write_bytes` for UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> Path:
    """Indented JSON, keys in insertion order; odd values (paths, numpy scalars) written via str()."""
    return atomic_write_text(path, json.dumps(obj, indent=2, default=str) + "\n")
