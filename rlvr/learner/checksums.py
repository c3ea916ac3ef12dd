"""SHA-256 checksums of a checkpoint's files: written when it is saved, checked when it is loaded.

A checkpoint's ``COMPLETE`` marker holds, as JSON, the size and SHA-256 of every file the save
wrote (``{"files": {"__0_0.distcp": [size, "hex"], ...}}``). The ranks share the hashing: rank
``r`` hashes every ``world``-th file and leaves its part in a hidden file, which rank 0 merges
into the marker. ``damage(path)`` re-reads the files and says what no longer matches (a file
missing, truncated or with another content, such as a flipped bit); a marker from before
checksums (``ok``) has nothing to check against.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

_PART = ".sha256.rank{}"
_CHUNK = 1 << 20


def file_digest(path: Path) -> tuple[int, str]:
    """The size and SHA-256 (hex) of ``path``."""
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def _data_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not p.name.startswith(".sha256.") and p.name != "COMPLETE")


def hash_share(folder: Path, rank: int, world: int) -> None:
    """Hash this rank's share of ``folder``'s files into a hidden part file (every rank)."""
    files = _data_files(folder)[rank::world]
    part = {str(p.relative_to(folder)): list(file_digest(p)) for p in files}
    (folder / _PART.format(rank)).write_text(json.dumps(part))


def merge_shares(folder: Path, world: int) -> str:
    """The marker text: every rank's part merged (rank 0, after the others wrote theirs)."""
    files: dict[str, list[object]] = {}
    for rank in range(world):
        part = folder / _PART.format(rank)
        files |= json.loads(part.read_text())
        os.unlink(part)
    return json.dumps({"files": dict(sorted(files.items()))}, indent=0) + "\n"


def damage(folder: Path, marker: str = "COMPLETE") -> list[str]:
    """What in ``folder`` no longer matches its marker's checksums (empty: intact or unchecked).

    Each item names a file and what is wrong: ``missing``, ``truncated (598 of 704 bytes)``,
    ``changed (checksum mismatch)``; an unreadable marker is one item too.
    """
    text = (folder / marker).read_text(errors="replace")
    if text.strip() == "ok":  # written before checksums: nothing to compare with
        return []
    try:
        files = json.loads(text)["files"]
        expected = {str(name): (int(size), str(sha)) for name, (size, sha) in files.items()}
    except (ValueError, KeyError, TypeError):
        return [f"{folder / marker}: the checksum list is unreadable"]
    problems = []
    for name, (size, sha) in expected.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{path}: missing")
            continue
        actual_size = path.stat().st_size
        if actual_size != size:
            problems.append(f"{path}: truncated or grown ({actual_size} of {size} bytes)")
        elif file_digest(path)[1] != sha:
            problems.append(f"{path}: changed (SHA-256 mismatch)")
    return problems


__all__ = ["damage", "file_digest", "hash_share", "merge_shares"]
