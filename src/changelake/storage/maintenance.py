"""OPTIMIZE (compaction that keeps row identity) and VACUUM (removing what nothing needs)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from changelake.catalog.model import TableCommit
from changelake.catalog.store import registered_paths, removal_times
from changelake.storage.snapshot import RID, VER, read_state
from changelake.storage.writer import partitions_for, write_data

if TYPE_CHECKING:
    from changelake.session import Session

SMALL_FILE_ROWS = 500_000
ORPHAN_MARGIN_SECONDS = 3600.0


@dataclass(frozen=True)
class OptimizeResult:
    version: int | None
    files_removed: int
    files_added: int
    rows: int


def optimize(session: Session, name: str, *, statement_id: str) -> OptimizeResult:
    """Rewrite files carrying deletion vectors, and small files, into few large ones.

    Rows keep their identity and last-changed version, so change queries see no change.
    """
    info = session.catalog.table(name)
    state = session.state(info)
    candidates = [f for f in state.files if f.dv_paths or f.file.row_count < SMALL_FILE_ROWS]
    if not candidates or (len(candidates) == 1 and not candidates[0].dv_paths):
        return OptimizeResult(None, 0, 0, 0)
    chosen = state.with_files(candidates)
    rows = chosen.live_rows
    added = []
    if rows:
        df = read_state(session.spark, session.warehouse, chosen, identity=True)
        added = write_data(
            session.warehouse,
            df,
            schema=state.schema,
            table=info.name,
            directory=session.warehouse.data_dir(statement_id),
            row_id=RID,
            row_version=VER,
            partitions=partitions_for(rows),
        )
    commit = TableCommit(
        table_id=info.table_id,
        table_name=info.name,
        read_version=state.version,
        operation="OPTIMIZE",
        statement_id=statement_id,
        added=tuple(added),
        removed_paths=tuple(f.file.path for f in candidates),
    )
    versions = session.catalog.commit([commit], now=session.now())
    return OptimizeResult(versions[info.table_id][-1], len(candidates), len(added), rows)


@dataclass(frozen=True)
class VacuumResult:
    files_removed: int
    orphans_removed: int
    readable_from_version: int


def vacuum(session: Session, name: str, *, keep_from_version: int | None = None) -> VacuumResult:
    """Delete files removed longer ago than retention, and orphans of crashed writers.

    ``keep_from_version``: versions at or after it stay readable regardless (live streams).
    """
    info = session.catalog.table(name)
    now = session.now()
    horizon = now - info.retention_days() * 86400.0
    removed_at = removal_times(session.catalog, info.table_id)
    expired_versions = {v for v, at in removed_at.items() if at < horizon}
    if keep_from_version is not None:
        expired_versions = {v for v in expired_versions if v <= keep_from_version}
    files = session.catalog.all_file_paths(info.table_id)
    doomed = [
        (path, dvs) for path, end, dvs in files if end is not None and end in expired_versions
    ]
    doomed_paths = {p for p, _ in doomed}
    dv_users: dict[str, set[str]] = defaultdict(set)
    for path, _, dvs in files:
        for dv in dvs:
            dv_users[dv].add(path)
    dv_doomed = {dv for dv, users in dv_users.items() if users <= doomed_paths}
    wh = session.warehouse
    for path in sorted(doomed_paths | dv_doomed):
        _delete(wh.fs, wh.fs_path(path))
    floor = max(expired_versions, default=info.vacuumed_before_version)
    session.catalog.forget_files(info.table_id, sorted(doomed_paths), vacuumed_before=floor)
    orphans = _remove_orphans(session, now=now)
    return VacuumResult(len(doomed_paths), orphans, max(floor, info.vacuumed_before_version))


def _remove_orphans(session: Session, *, now: float) -> int:
    """Delete Parquet files no catalog row references, older than the safety margin."""
    wh = session.warehouse
    known = registered_paths(session.catalog)
    removed = 0
    for top in ("data", "dv"):
        selector = pafs.FileSelector(wh.fs_path(top), recursive=True, allow_not_found=True)
        infos = wh.fs.get_file_info(selector)
        for entry in infos:
            if entry.type != pafs.FileType.File:
                continue
            relative = entry.path[len(wh.fs_path("")) :]
            old = entry.mtime is not None and entry.mtime.timestamp() < now - ORPHAN_MARGIN_SECONDS
            if relative not in known and old:
                _delete(wh.fs, entry.path)
                removed += relative.endswith(".parquet")
        for entry in sorted(
            (i for i in infos if i.type == pafs.FileType.Directory), key=lambda i: -len(i.path)
        ):
            if not wh.fs.get_file_info(pafs.FileSelector(entry.path, allow_not_found=True)):
                wh.fs.delete_dir(entry.path)
    return removed


def _delete(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except FileNotFoundError:
        pass
