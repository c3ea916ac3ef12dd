"""Read a W&B offline run file (``run-<id>.wandb``) back with wandb's own protobuf records.

The file is wandb's record log (LevelDB's log format: 32 KiB blocks of chunks, each with a
7-byte header: crc32, length, type FULL/FIRST/MIDDLE/LAST; the file starts with the 7-byte
``:W&B`` header), each record a ``wandb.proto.wandb_internal_pb2.Record``: what ``wandb sync``
uploads. wandb ships no Python reader any more (its service reads them), so the framing is
decoded here and the records by wandb's own classes.
"""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

BLOCK = 32 * 1024
HEADER = struct.Struct("<IHB")  # crc32, length, chunk type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def complete_records(path: Path, timeout: float = 60.0) -> list[Any]:
    """``records(path)`` once the file is complete: it holds the exit record and stopped growing.

    ``run.finish()`` returns before wandb's service has flushed its last block to the file.
    """
    deadline, size = time.monotonic() + timeout, -1
    while True:
        recs = records(path)
        done = any(r.WhichOneof("record_type") == "exit" for r in recs)
        if (done and path.stat().st_size == size) or time.monotonic() > deadline:
            return recs
        size = path.stat().st_size
        time.sleep(1.0)


def records(path: Path) -> list[Any]:
    """Every record of a ``.wandb`` file, in order (``wandb_internal_pb2.Record``)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, pos, pending = [], 7, b""
    while pos + HEADER.size <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER.size:  # the block's tail is padding
            pos += left
            continue
        _, length, kind = HEADER.unpack_from(data, pos)
        chunk = data[pos + HEADER.size:pos + HEADER.size + length]
        pos += HEADER.size + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out


def history(recs: list[Any]) -> list[dict[str, Any]]:
    """The history rows (``run.log``): ``{"_step": ..., key: value}``, values JSON-decoded."""
    rows = []
    for rec in recs:
        if rec.WhichOneof("record_type") == "history":
            rows.append({"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                         for item in rec.history.item})
    return rows


def run_record(recs: list[Any]) -> Any:
    """The run record (id, name, project, config)."""
    return next(r.run for r in recs if r.WhichOneof("record_type") == "run")


def config(recs: list[Any]) -> dict[str, Any]:
    """The run's config as logged (run record and later config updates)."""
    out: dict[str, Any] = {}
    for rec in recs:
        kind = rec.WhichOneof("record_type")
        items = rec.run.config.update if kind == "run" else \
            rec.config.update if kind == "config" else []
        for item in items:
            out["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return out


def summary(recs: list[Any]) -> dict[str, Any]:
    """The last summary values written (``run.summary``)."""
    out: dict[str, Any] = {}
    for rec in recs:
        if rec.WhichOneof("record_type") == "summary":
            for item in rec.summary.update:
                out["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return out
