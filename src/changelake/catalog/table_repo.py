"""Tables, their schemas and versions: reads, and the updates that change them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, and_, func, or_, select

from changelake.catalog import internal
from changelake.catalog import tables as t
from changelake.catalog.model import TableInfo, VersionInfo
from changelake.errors import ConflictError, DependencyError, ObjectExistsError
from changelake.schema import Column, TableSchema


def table_info(row: Any) -> TableInfo:
    return TableInfo(
        table_id=row.table_id,
        name=row.name,
        current_version=row.current_version,
        created_at=row.created_at,
        properties=json.loads(row.properties),
        vacuumed_before_version=row.vacuumed_before_version,
        current_commit=row.current_commit,
    )


def version_info(row: Any) -> VersionInfo:
    return VersionInfo(
        version=row.version,
        committed_at=row.committed_at,
        operation=row.operation,
        statement_id=row.statement_id,
        rows_inserted=row.rows_inserted,
        rows_updated=row.rows_updated,
        rows_deleted=row.rows_deleted,
        files_added=row.files_added,
        files_removed=row.files_removed,
        commit_number=row.commit_number,
    )


# -- reads ----------------------------------------------------------------------------------------


def find_live(conn: Connection, name: str) -> Any:
    return conn.execute(
        select(t.tables).where(t.tables.c.name == name.lower(), t.tables.c.dropped_at.is_(None))
    ).first()


def find_live_named(conn: Connection, names: Sequence[str]) -> list[Any]:
    lowered = [n.lower() for n in names]
    return list(
        conn.execute(
            select(t.tables).where(t.tables.c.name.in_(lowered), t.tables.c.dropped_at.is_(None))
        ).all()
    )


def by_id(conn: Connection, table_id: int) -> Any:
    return conn.execute(select(t.tables).where(t.tables.c.table_id == table_id)).one()


def list_live(conn: Connection) -> list[TableInfo]:
    rows = conn.execute(
        select(t.tables).where(t.tables.c.dropped_at.is_(None)).order_by(t.tables.c.name)
    ).all()
    return [table_info(r) for r in rows]


def live_names(conn: Connection) -> list[str]:
    return list(
        conn.execute(select(t.tables.c.name).where(t.tables.c.dropped_at.is_(None))).scalars()
    )


def schema_at(conn: Connection, table_id: int, version: int) -> TableSchema:
    rows = conn.execute(
        select(t.columns)
        .where(
            t.columns.c.table_id == table_id,
            t.columns.c.begin_version <= version,
            or_(t.columns.c.end_version.is_(None), t.columns.c.end_version > version),
        )
        .order_by(t.columns.c.ordinal)
    ).all()
    return TableSchema(tuple(Column(r.column_id, r.name, r.type, r.nullable) for r in rows))


def schemas_at(conn: Connection, wanted: Mapping[int, int]) -> dict[int, TableSchema]:
    """``schema_at`` of each table (id) at its version in ``wanted``, in one query."""
    c = t.columns.c
    rows = conn.execute(
        select(t.columns)
        .where(
            or_(
                *(
                    and_(
                        c.table_id == table_id,
                        c.begin_version <= version,
                        or_(c.end_version.is_(None), c.end_version > version),
                    )
                    for table_id, version in wanted.items()
                )
            )
        )
        .order_by(c.table_id, c.ordinal)
    ).all()
    columns: dict[int, list[Column]] = {table_id: [] for table_id in wanted}
    for r in rows:
        columns[r.table_id].append(Column(r.column_id, r.name, r.type, r.nullable))
    return {table_id: TableSchema(tuple(cols)) for table_id, cols in columns.items()}


def versions(
    conn: Connection, table_id: int, *, after_exclusive: int, upto_inclusive: int | None
) -> list[VersionInfo]:
    query = select(t.versions).where(
        t.versions.c.table_id == table_id, t.versions.c.version > after_exclusive
    )
    if upto_inclusive is not None:
        query = query.where(t.versions.c.version <= upto_inclusive)
    return [version_info(r) for r in conn.execute(query.order_by(t.versions.c.version)).all()]


def version_as_of(conn: Connection, table_id: int, timestamp: float, *, inclusive: bool) -> Any:
    cmp = (
        t.versions.c.committed_at <= timestamp
        if inclusive
        else t.versions.c.committed_at < timestamp
    )
    return conn.execute(
        select(func.max(t.versions.c.version)).where(t.versions.c.table_id == table_id, cmp)
    ).scalar()


def versions_as_of(
    conn: Connection, table_ids: Sequence[int], timestamp: float, *, inclusive: bool
) -> dict[int, int]:
    """``version_as_of`` for several tables in one query (a table without one is left out)."""
    v = t.versions.c
    cmp = v.committed_at <= timestamp if inclusive else v.committed_at < timestamp
    rows = conn.execute(
        select(v.table_id, func.max(v.version))
        .where(v.table_id.in_(list(table_ids)), cmp)
        .group_by(v.table_id)
    ).all()
    return {table_id: version for table_id, version in rows if version is not None}


def version_infos(
    conn: Connection, wanted: Sequence[tuple[int, int]]
) -> dict[tuple[int, int], VersionInfo]:
    """The versions ``wanted`` (table id, version) that exist, in one query."""
    v = t.versions.c
    rows = conn.execute(
        select(t.versions).where(
            or_(*(and_(v.table_id == table_id, v.version == n) for table_id, n in wanted))
        )
    ).all()
    return {(r.table_id, r.version): version_info(r) for r in rows}


def rows_changed(conn: Connection, intervals: Sequence[tuple[int, int, int]]) -> int:
    """The rows the versions in ``intervals`` (table id, start exclusive, end inclusive)
    inserted, deleted and updated (an update counted twice: its old row and its new one)."""
    v = t.versions.c
    total = func.coalesce(func.sum(v.rows_inserted + v.rows_deleted + 2 * v.rows_updated), 0)
    within = [
        and_(v.table_id == table_id, v.version > start, v.version <= end)
        for table_id, start, end in intervals
    ]
    return int(conn.execute(select(total).where(or_(*within))).scalar_one())


def version_at(conn: Connection, table_id: int, commit_number: int) -> int | None:
    """The table's last version made by a commit numbered up to ``commit_number``."""
    return conn.execute(
        select(func.max(t.versions.c.version)).where(
            t.versions.c.table_id == table_id, t.versions.c.commit_number <= commit_number
        )
    ).scalar()


def changed_since(
    conn: Connection, table_id: int, version: int, *, upto_inclusive: int | None, inserts_only: bool
) -> bool:
    """Whether a version in ``(version, upto]`` changed rows: the per-version change summary
    (a compaction's version moved rows without changing them)."""
    summary = t.versions.c
    changed = (
        summary.rows_inserted > 0
        if inserts_only
        else or_(
            and_(
                or_(summary.files_added > 0, summary.files_removed > 0),
                summary.operation.not_in(t.MOVING_OPERATIONS),
            ),
            summary.rows_deleted > 0,
            summary.rows_updated > 0,
        )
    )
    query = select(summary.version).where(
        summary.table_id == table_id, summary.version > version, changed
    )
    if upto_inclusive is not None:
        query = query.where(summary.version <= upto_inclusive)
    return conn.execute(query.limit(1)).first() is not None


# -- checks ---------------------------------------------------------------------------------------


def lock(conn: Connection, table_id: int, *, for_update: bool) -> Any:
    """The table's row, locked for the rest of the transaction (PostgreSQL; SQLite holds the
    database write lock already); ConflictError if it was dropped or replaced."""
    query = select(t.tables).where(t.tables.c.table_id == table_id)
    if for_update:
        query = query.with_for_update()
    row = conn.execute(query).first()
    if row is None or row.dropped_at is not None:
        raise ConflictError(
            f"Table {row.name if row else table_id} was dropped or replaced by a concurrent"
            " statement; this statement changed nothing."
        )
    return row


def check_schema_unchanged(
    conn: Connection, table_id: int, name: str, *, since_version: int
) -> None:
    changed = conn.execute(
        select(func.min(t.columns.c.begin_version)).where(
            t.columns.c.table_id == table_id, t.columns.c.begin_version > since_version
        )
    ).scalar()
    if changed is not None:
        raise ConflictError(
            f"Table {name}'s columns changed at version {changed} (ALTER TABLE), after this"
            f" statement read version {since_version}; it changed nothing. Run it again: it will"
            " be planned for the new columns."
        )


def check_columns_writable(
    conn: Connection, table_id: int, name: str, columns: tuple[Column, ...], *, version: int
) -> None:
    now = {c.column_id: c for c in schema_at(conn, table_id, version).columns}
    written = {c.column_id for c in columns}
    for c in columns:
        found = now.get(c.column_id)
        if found is None or found.type != c.type:
            change = "was dropped" if found is None else f"is now {found.type.upper()}"
            raise ConflictError(
                f"Column {c.name} of table {name} {change} (ALTER TABLE) since these rows were"
                " written for it; they were not committed. Reopen the writer (the ingest"
                " channel) to write the table's current columns."
            )
    missing = [c.name for c in now.values() if not c.nullable and c.column_id not in written]
    if missing:
        raise ConflictError(
            f"Table {name} has NOT NULL column(s) {', '.join(missing)} that these rows do not"
            " write (added by ALTER TABLE since); they were not committed. Reopen the writer"
            " (the ingest channel) to write the table's current columns."
        )


def check_name_free(conn: Connection, name: str, *, kind: str) -> None:
    for label, table, key in (
        ("Table", t.tables, t.tables.c.table_id),
        ("View", t.views, t.views.c.view_id),
        ("Stream", t.streams, t.streams.c.stream_id),
    ):
        if conn.execute(
            select(key).where(table.c.name == name, table.c.dropped_at.is_(None))
        ).first():
            raise ObjectExistsError(
                f"{label} {name!r} already exists; use CREATE OR REPLACE {kind} or another name."
            )


def check_no_dependents(conn: Connection, name: str, *, action: str) -> None:
    dependents = [
        r.name
        for r in conn.execute(
            select(t.views.c.name, t.views.c.depends_on).where(t.views.c.dropped_at.is_(None))
        )
        if name in json.loads(r.depends_on)
    ]
    if dependents:
        raise DependencyError(
            f"Cannot {action} {name!r}: view(s) {', '.join(sorted(dependents))} depend on it."
            f" Drop or replace those views first."
        )
    check_no_dynamic_dependents(conn, name, action=action)


def check_no_dynamic_dependents(conn: Connection, name: str, *, action: str) -> None:
    dynamic = _dynamic_dependents(conn, name)
    if dynamic:
        raise DependencyError(
            f"Cannot {action} {name!r}: dynamic table(s) {', '.join(dynamic)} read it. Drop or"
            " replace those dynamic tables first."
        )


def _dynamic_dependents(conn: Connection, name: str) -> list[str]:
    """The live dynamic tables whose query names table or view ``name``."""
    d = t.dynamic_tables.c
    rows = conn.execute(
        select(t.tables.c.name, d.depends_on)
        .join(t.dynamic_tables, d.table_id == t.tables.c.table_id)
        .where(t.tables.c.dropped_at.is_(None))
    )
    return sorted(r.name for r in rows if name.lower() in json.loads(r.depends_on))


# -- updates --------------------------------------------------------------------------------------


def insert(conn: Connection, name: str, properties: dict[str, str], *, now: float) -> int:
    return conn.execute(
        t.tables.insert().values(
            name=name,
            current_version=0,
            next_row_id=0,
            created_at=now,
            properties=json.dumps(properties, sort_keys=True),
        )
    ).inserted_primary_key[0]


def drop(conn: Connection, table_id: int, *, now: float) -> None:
    """Drop the table and, with it, the internal tables it owns (catalog/internal.py)."""
    owned = t.tables.c.name.startswith(internal.owned_prefix(table_id), autoescape=True)
    conn.execute(
        t.tables.update()
        .where(or_(t.tables.c.table_id == table_id, owned & t.tables.c.dropped_at.is_(None)))
        .values(dropped_at=now)
    )


def rename(conn: Connection, table_id: int, new_name: str) -> None:
    conn.execute(t.tables.update().where(t.tables.c.table_id == table_id).values(name=new_name))


def set_properties(conn: Connection, table_id: int, updates: dict[str, str]) -> None:
    row = by_id(conn, table_id)
    props = json.loads(row.properties) | updates
    conn.execute(
        t.tables.update()
        .where(t.tables.c.table_id == table_id)
        .values(properties=json.dumps(props, sort_keys=True))
    )


def set_counters(conn: Connection, table_id: int, **values: int) -> None:
    """Set ``current_version``, ``current_commit`` and/or ``next_row_id``."""
    conn.execute(t.tables.update().where(t.tables.c.table_id == table_id).values(**values))


def set_created_at(conn: Connection, table_id: int, created_at: float) -> None:
    conn.execute(
        t.tables.update().where(t.tables.c.table_id == table_id).values(created_at=created_at)
    )


def set_vacuumed_before(conn: Connection, table_id: int, version: int, *, postgres: bool) -> None:
    larger = func.greatest if postgres else func.max
    conn.execute(
        t.tables.update()
        .where(t.tables.c.table_id == table_id)
        .values(vacuumed_before_version=larger(t.tables.c.vacuumed_before_version, version))
    )


def set_schema(conn: Connection, table_id: int, schema: TableSchema, *, version: int) -> None:
    """``schema`` from ``version`` on (the previous one ends there)."""
    conn.execute(
        t.columns.update()
        .where(t.columns.c.table_id == table_id, t.columns.c.end_version.is_(None))
        .values(end_version=version)
    )
    conn.execute(
        t.columns.insert(),
        [
            {
                "table_id": table_id,
                "column_id": c.column_id,
                "begin_version": version,
                "end_version": None,
                "ordinal": i,
                "name": c.name,
                "type": c.type,
                "nullable": c.nullable,
            }
            for i, c in enumerate(schema.columns)
        ],
    )


def insert_version(conn: Connection, table_id: int, version: int, **values: Any) -> None:
    """Record a version: committed_at, operation, statement_id and its change summary."""
    conn.execute(t.versions.insert().values(table_id=table_id, version=version, **values))
