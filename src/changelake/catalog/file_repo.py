"""Data files and deletion vectors: reads for snapshots, change scans and vacuum, and the updates
that register and retire them."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, case, func, or_, select

from changelake.catalog import tables as t
from changelake.catalog.file_history import FileHistory
from changelake.catalog.model import DataFile, LiveFile, NewDeletes, TrackedFile
from changelake.errors import ConflictError


def data_file(row: Any) -> DataFile:
    return DataFile(
        path=row.path,
        row_count=row.row_count,
        size_bytes=row.size_bytes,
        base_row_id=row.base_row_id,
        begin_version=row.begin_version,
        stats=json.loads(row.stats),
        moved=bool(row.moved_in),
        index=row.index_path,
    )


def _live_at(version: int) -> Any:
    return and_(
        t.files.c.begin_version <= version,
        or_(t.files.c.end_version.is_(None), t.files.c.end_version > version),
    )


# -- reads ----------------------------------------------------------------------------------------


def snapshot_files(conn: Connection, table_id: int, version: int) -> list[LiveFile]:
    """One query: the live files, each joined with its DV parts up to ``version``."""
    d = t.deletes.c
    rows = conn.execute(
        select(t.files, d.dv_path, d.row_count.label("dv_rows"))
        .outerjoin(t.deletes, and_(d.file_id == t.files.c.file_id, d.version <= version))
        .where(t.files.c.table_id == table_id, _live_at(version))
        .order_by(t.files.c.file_id, d.version)
    ).all()
    out: list[LiveFile] = []
    dvs: list[Any] = []
    for i, r in enumerate(rows):
        if r.dv_path is not None:
            dvs.append(r)
        if i + 1 == len(rows) or rows[i + 1].file_id != r.file_id:
            out.append(
                LiveFile(
                    file=data_file(r),
                    dv_paths=tuple(d.dv_path for d in dvs),
                    deleted_rows=sum(d.dv_rows for d in dvs),
                )
            )
            dvs = []
    return out


def files_changed_between(
    conn: Connection, table_id: int, *, start_exclusive: int, end_inclusive: int
) -> list[TrackedFile]:
    """One query: the files the interval touched, each joined with its DV parts up to its end."""
    s, e = start_exclusive, end_inclusive
    f, d = t.files.c, t.deletes.c
    dv_file_ids = select(d.file_id).where(d.table_id == table_id, d.version > s, d.version <= e)
    rows = conn.execute(
        select(t.files, d.version.label("dv_version"), d.dv_path, d.row_count.label("dv_rows"))
        .outerjoin(t.deletes, and_(d.file_id == f.file_id, d.version <= e))
        .where(
            f.table_id == table_id,
            or_(
                and_(f.begin_version > s, f.begin_version <= e),
                and_(f.end_version > s, f.end_version <= e),
                f.file_id.in_(dv_file_ids),
            ),
        )
        .order_by(f.file_id, d.version)
    ).all()
    return _tracked(rows)[table_id] if rows else []


def _tracked(rows: Sequence[Any]) -> dict[int, list[TrackedFile]]:
    """Per table, the files of ``rows`` (a file's rows adjacent, one per DV part or one without
    any), each with its DV parts in order."""
    files: dict[int, list[TrackedFile]] = defaultdict(list)
    dvs: list[tuple[int, str, int]] = []
    for i, r in enumerate(rows):
        if r.dv_path is not None:
            dvs.append((r.dv_version, r.dv_path, r.dv_rows))
        if i + 1 == len(rows) or rows[i + 1].file_id != r.file_id:
            tracked = TrackedFile(data_file(r), r.end_version, tuple(dvs), bool(r.moved_out))
            files[r.table_id].append(tracked)
            dvs = []
    return files


def file_histories(
    conn: Connection, ranges: Mapping[int, tuple[int, int]]
) -> dict[int, FileHistory]:
    """Per table, its files over versions ``[since, until]`` (``ranges``), in one query: the
    files live at one of them, each joined with its DV parts up to ``until``."""
    f, d = t.files.c, t.deletes.c
    wanted = or_(
        *(
            and_(
                f.table_id == table_id,
                f.begin_version <= until,
                or_(f.end_version.is_(None), f.end_version > since),
            )
            for table_id, (since, until) in ranges.items()
        )
    )
    until_of = case(*((f.table_id == table_id, until) for table_id, (_, until) in ranges.items()))
    rows = conn.execute(
        select(t.files, d.version.label("dv_version"), d.dv_path, d.row_count.label("dv_rows"))
        .outerjoin(t.deletes, and_(d.file_id == f.file_id, d.version <= until_of))
        .where(wanted)
        .order_by(f.file_id, d.version)
    ).all()
    files = _tracked(rows)
    return {
        table_id: FileHistory(since, until, tuple(files.get(table_id, ())))
        for table_id, (since, until) in ranges.items()
    }


def all_file_paths(conn: Connection, table_id: int) -> list[tuple[str, int | None, list[str]]]:
    rows = conn.execute(
        select(
            t.files.c.file_id, t.files.c.path, t.files.c.end_version, t.files.c.index_path
        ).where(t.files.c.table_id == table_id)
    ).all()
    dv_rows = conn.execute(
        select(t.deletes.c.file_id, t.deletes.c.dv_path).where(t.deletes.c.table_id == table_id)
    ).all()
    dvs: dict[int, list[str]] = defaultdict(list)
    for d in dv_rows:
        dvs[d.file_id].append(d.dv_path)
    # a file's index is shared like its DVs: kept while one of its users is
    return [
        (r.path, r.end_version, dvs[r.file_id] + [r.index_path] * bool(r.index_path)) for r in rows
    ]


def registered_paths(conn: Connection) -> set[str]:
    paths = set(conn.execute(select(t.files.c.path)).scalars())
    indexes = conn.execute(select(t.files.c.index_path).where(t.files.c.index_path.is_not(None)))
    return paths | set(indexes.scalars()) | set(conn.execute(select(t.deletes.c.dv_path)).scalars())


def removal_times(conn: Connection, table_id: int) -> dict[int, float]:
    rows = conn.execute(
        select(t.versions.c.version, t.versions.c.committed_at)
        .where(t.versions.c.table_id == table_id)
        .where(
            t.versions.c.version.in_(
                select(t.files.c.end_version).where(
                    t.files.c.table_id == table_id, t.files.c.end_version.is_not(None)
                )
            )
        )
    ).all()
    return {r.version: r.committed_at for r in rows}


# -- checks ---------------------------------------------------------------------------------------


def check_untouched(
    conn: Connection, table_id: int, name: str, paths: Sequence[str], *, since_version: int
) -> None:
    """ConflictError if a version after ``since_version`` removed ``paths`` or gave them DVs."""
    paths = list(paths)
    removed = (
        select(t.files.c.end_version)
        .where(
            t.files.c.table_id == table_id,
            t.files.c.path.in_(paths),
            t.files.c.end_version > since_version,
        )
        .limit(1)
        .scalar_subquery()
    )
    deleted = (
        select(t.deletes.c.version)
        .join(t.files, t.files.c.file_id == t.deletes.c.file_id)
        .where(
            t.deletes.c.table_id == table_id,
            t.deletes.c.version > since_version,
            t.files.c.path.in_(paths),
        )
        .limit(1)
        .scalar_subquery()
    )
    # one query: the version that removed one of the paths, else one that deleted rows of one
    version = conn.execute(select(func.coalesce(removed, deleted))).scalar()
    if version is not None:
        raise ConflictError(
            f"Conflict on table {name}: version {version}, committed by a concurrent statement"
            f" after this one read version {since_version}, changed the same rows. This statement"
            " changed nothing; run it again."
        )


# -- updates --------------------------------------------------------------------------------------


def add_files(
    conn: Connection,
    table_id: int,
    files: Sequence[DataFile],
    *,
    version: int,
    next_row_id: int,
) -> int:
    """Register ``files`` as of ``version``; files without a base row id get the next ones.
    Returns the table's next free row id."""
    rows = []
    for f in files:
        base = f.base_row_id
        if base is None:
            base, next_row_id = next_row_id, next_row_id + f.row_count
        rows.append(
            {
                "table_id": table_id,
                "path": f.path,
                "row_count": f.row_count,
                "size_bytes": f.size_bytes,
                "base_row_id": base,
                "begin_version": version,
                "end_version": None,
                "stats": json.dumps(f.stats, default=str),
                "moved_in": f.moved,
                "index_path": f.index,
            }
        )
    if rows:
        conn.execute(t.files.insert(), rows)
    return next_row_id


def remove_files(
    conn: Connection, table_id: int, paths: Sequence[str], *, version: int, moved: bool = False
) -> None:
    """Retire ``paths`` as of ``version``; ``moved``: a compaction copied their live rows."""
    conn.execute(
        t.files.update()
        .where(
            t.files.c.table_id == table_id,
            t.files.c.path.in_(list(paths)),
            t.files.c.end_version.is_(None),
        )
        .values(end_version=version, moved_out=moved)
    )


def add_deletes(
    conn: Connection, table_id: int, deletes: Sequence[NewDeletes], *, version: int
) -> None:
    ids = dict(
        conn.execute(
            select(t.files.c.path, t.files.c.file_id).where(
                t.files.c.table_id == table_id,
                t.files.c.path.in_([d.file_path for d in deletes]),
            )
        ).all()
    )
    conn.execute(
        t.deletes.insert(),
        [
            {
                "table_id": table_id,
                "file_id": ids[d.file_path],
                "version": version,
                "dv_path": d.dv_path,
                "row_count": d.row_count,
            }
            for d in deletes
        ],
    )


def forget_files(conn: Connection, table_id: int, paths: Sequence[str]) -> None:
    if not paths:
        return
    ids = (
        conn.execute(
            select(t.files.c.file_id).where(
                t.files.c.table_id == table_id, t.files.c.path.in_(list(paths))
            )
        )
        .scalars()
        .all()
    )
    conn.execute(t.deletes.delete().where(t.deletes.c.file_id.in_(ids)))
    conn.execute(t.files.delete().where(t.files.c.file_id.in_(ids)))
