"""OPTIMIZE (compaction that keeps row identity), the scheduler's compaction of dynamic and
external tables, and VACUUM (removing what nothing needs)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pyarrow.fs as pafs

from changelake.catalog import Catalog
from changelake.catalog.model import LiveFile, TableInfo
from changelake.catalog.requests import CommitRequest, ForgetFiles, Requirement
from changelake.catalog.writes import TableWrite, WriteKind, write_request
from changelake.dml.common import write_rows
from changelake.runtime.env import Context
from changelake.storage.snapshot import RID, VER, state_relation
from changelake.storage.warehouse import Warehouse
from changelake.storage.writer import partitions_for
from changelake.txn.retention import retention_horizon, stream_floor
from changelake.txn.snapshot import TableState

SMALL_FILE_ROWS = 500_000
ORPHAN_MARGIN_SECONDS = 3600.0


@dataclass(frozen=True)
class OptimizeResult:
    version: int | None
    files_removed: int
    files_added: int
    rows: int


def optimize(ctx: Context, name: str) -> OptimizeResult:
    """Rewrite files carrying deletion vectors, and small files, into few large ones.

    Rows keep their identity and last-changed version, so change queries see no change.
    """
    info = ctx.table(name)
    state = ctx.state(info)
    candidates = [f for f in state.files if f.dv_paths or f.file.row_count < SMALL_FILE_ROWS]
    if not candidates or (len(candidates) == 1 and not candidates[0].dv_paths):
        return OptimizeResult(None, 0, 0, 0)
    return _compacted(ctx, info, state, candidates, operation="OPTIMIZE")


def compact_small_files(
    ctx: Context,
    info: TableInfo,
    *,
    least_files: int,
    most_rows: int,
    requirements: tuple[Requirement, ...] = (),
) -> OptimizeResult:
    """The scheduler's compaction of a dynamic or external table, whose every refresh or follow
    step adds a small file: its small files, oldest first and up to ``most_rows`` live rows (a
    round's budget), merged into few, their deletion vectors applied, every row keeping its
    identity and version; nothing while fewer than ``least_files`` are small. Committed as a
    COMPACT write, which change scans see through, also requiring ``requirements``; a refresh
    that removed or deleted from one of the files first makes it fail (ConflictError)."""
    state = ctx.state(info)
    small = sorted(
        (f for f in state.files if f.file.row_count < SMALL_FILE_ROWS),
        key=lambda f: (f.file.begin_version or 0, f.file.path),
    )
    chosen, rows = [], 0
    for f in small:
        if chosen and rows + f.live_rows > most_rows:
            break
        chosen.append(f)
        rows += f.live_rows
    if len(chosen) < least_files:
        return OptimizeResult(None, 0, 0, 0)
    return _compacted(ctx, info, state, chosen, operation="COMPACT", requirements=requirements)


def _compacted(
    ctx: Context,
    info: TableInfo,
    state: TableState,
    candidates: list[LiveFile],
    *,
    operation: str,
    requirements: tuple[Requirement, ...] = (),
) -> OptimizeResult:
    """``candidates`` of ``info`` at ``state`` rewritten as few files."""
    chosen = state.with_files(candidates)
    rows = chosen.live_rows
    added = []
    if rows:
        df = state_relation(ctx.spark, ctx.warehouse, chosen, identity=True).frame(ctx.spark)
        added = write_rows(
            ctx,
            df,
            schema=state.schema,
            table=info.name,
            row_id=RID,
            row_version=VER,
            partitions=partitions_for(rows),
        )
    # Compaction removes whole files: a concurrent DELETE or UPDATE of any of them conflicts.
    write = TableWrite(
        info.table_id,
        info.name,
        state.version,
        WriteKind.COMPACT,
        added=tuple(added),
        removed=tuple(f.file.path for f in candidates),
    )
    request = write_request(ctx.statement_id, operation, [write], requirements=requirements)
    result = ctx.commit(request)
    return OptimizeResult(result.version_of(info.table_id), len(candidates), len(added), rows)


@dataclass(frozen=True)
class VacuumResult:
    files_removed: int
    orphans_removed: int
    readable_from_version: int


def vacuum(ctx: Context, name: str) -> VacuumResult:
    """Delete files removed longer ago than retention, and orphans of crashed writers.

    Live streams on the table extend retention (paper 2.3): the versions after the oldest
    frontier stay readable until the stream goes stale.
    """
    info = ctx.table(name)
    now = ctx.now()
    keep_from_version = stream_floor(ctx.catalog, info, now=now)
    horizon = retention_horizon(info, now=now)
    removed_at = ctx.catalog.removal_times(info.table_id)
    expired_versions = {v for v, at in removed_at.items() if at < horizon}
    if keep_from_version is not None:
        expired_versions = {v for v in expired_versions if v <= keep_from_version}
    files = ctx.catalog.all_file_paths(info.table_id)
    doomed = [
        (path, dvs) for path, end, dvs in files if end is not None and end in expired_versions
    ]
    doomed_paths = {p for p, _ in doomed}
    dv_users: dict[str, set[str]] = defaultdict(set)
    for path, _, dvs in files:
        for dv in dvs:
            dv_users[dv].add(path)
    dv_doomed = {dv for dv, users in dv_users.items() if users <= doomed_paths}
    for path in sorted(doomed_paths | dv_doomed):
        _delete(ctx.warehouse.fs, ctx.warehouse.fs_path(path))
    floor = max(expired_versions, default=info.vacuumed_before_version)
    ctx.commit(
        CommitRequest(
            ctx.statement_id,
            "VACUUM",
            updates=(ForgetFiles(info.table_id, tuple(sorted(doomed_paths)), floor),),
        )
    )
    orphans = _remove_orphans(ctx.catalog, ctx.warehouse, now=now)
    return VacuumResult(len(doomed_paths), orphans, max(floor, info.vacuumed_before_version))


def _remove_orphans(catalog: Catalog, wh: Warehouse, *, now: float) -> int:
    """Delete Parquet files no catalog row references, older than the safety margin."""
    known = catalog.registered_paths()
    removed = 0
    for top in ("data", "dv", "index"):
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
