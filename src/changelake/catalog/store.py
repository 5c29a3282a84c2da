"""The metadata database: tables, schemas, versions, files, deletion vectors, views.

SQLite (one file in the warehouse) by default, PostgreSQL for shared use. Every write happens in
one database transaction; commits validate against what concurrent writers committed first.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Connection, Engine, and_, create_engine, event, func, or_, select
from sqlalchemy.exc import IntegrityError

from changelake.catalog import tables as t
from changelake.catalog.model import (
    DataFile,
    LiveFile,
    StreamAdvance,
    StreamInfo,
    TableCommit,
    TableInfo,
    TrackedFile,
    VersionInfo,
)
from changelake.errors import (
    ChangelakeError,
    ConflictError,
    DependencyError,
    ObjectExistsError,
    StreamConsumedError,
    StreamNotFoundError,
    TableNotFoundError,
    did_you_mean,
)
from changelake.schema import Column, TableSchema


def engine_for(url: str) -> Engine:
    """A SQLAlchemy engine for a catalog URL (``sqlite:///...`` or ``postgresql://...``)."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"timeout": 60})

        @event.listens_for(engine, "connect")
        def _connect(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=60000")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _begin(conn: Connection) -> None:
            write = conn.get_execution_options().get("cl_write", False)
            conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

        return engine
    return create_engine(url, pool_pre_ping=True)


class Catalog:
    """Metadata operations on one catalog database. Safe to share across threads and processes."""

    def __init__(self, url: str):
        self.url = url
        self.engine = engine_for(url)
        self._is_postgres = self.engine.dialect.name == "postgresql"
        self._migrate()

    def close(self) -> None:
        self.engine.dispose()

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(cl_write=True)
            with conn.begin():
                yield conn

    def _migrate(self) -> None:
        try:
            with self._write() as conn:
                t.metadata.create_all(conn)
                found = conn.execute(
                    select(t.meta.c.value).where(t.meta.c.key == "schema_version")
                ).scalar()
                if found is None:
                    conn.execute(
                        t.meta.insert().values(key="schema_version", value=str(t.SCHEMA_VERSION))
                    )
                elif int(found) > t.SCHEMA_VERSION:
                    raise ChangelakeError(
                        f"The catalog at {self.url} has schema version {found}, newer than this "
                        f"changelake understands ({t.SCHEMA_VERSION}); upgrade changelake."
                    )
        except IntegrityError:  # another process created the schema at the same moment
            pass

    # -- tables -------------------------------------------------------------------------------

    @staticmethod
    def _table_info(row: Any) -> TableInfo:
        return TableInfo(
            table_id=row.table_id,
            name=row.name,
            current_version=row.current_version,
            created_at=row.created_at,
            properties=json.loads(row.properties),
            vacuumed_before_version=row.vacuumed_before_version,
        )

    def find_table(self, name: str) -> TableInfo | None:
        with self._read() as conn:
            row = conn.execute(
                select(t.tables).where(
                    t.tables.c.name == name.lower(), t.tables.c.dropped_at.is_(None)
                )
            ).first()
        return None if row is None else self._table_info(row)

    def table(self, name: str) -> TableInfo:
        """The live table ``name``, or TableNotFoundError suggesting the closest name."""
        found = self.find_table(name)
        if found is None:
            raise TableNotFoundError(
                f"Table {name!r} does not exist.{did_you_mean(name, self.object_names())}"
                " SHOW TABLES lists the tables."
            )
        return found

    def table_by_id(self, table_id: int) -> TableInfo:
        with self._read() as conn:
            row = conn.execute(select(t.tables).where(t.tables.c.table_id == table_id)).one()
        return self._table_info(row)

    def list_tables(self) -> list[TableInfo]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.tables).where(t.tables.c.dropped_at.is_(None)).order_by(t.tables.c.name)
            ).all()
        return [self._table_info(r) for r in rows]

    def object_names(self) -> list[str]:
        """Names of all live tables and views (for suggestions)."""
        with self._read() as conn:
            names = (
                conn.execute(select(t.tables.c.name).where(t.tables.c.dropped_at.is_(None)))
                .scalars()
                .all()
            )
            names += (
                conn.execute(select(t.views.c.name).where(t.views.c.dropped_at.is_(None)))
                .scalars()
                .all()
            )
        return list(names)

    def _check_name_free(self, conn: Connection, name: str, *, kind: str) -> None:
        if conn.execute(
            select(t.tables.c.table_id).where(
                t.tables.c.name == name, t.tables.c.dropped_at.is_(None)
            )
        ).first():
            raise ObjectExistsError(
                f"Table {name!r} already exists; use CREATE OR REPLACE {kind} or another name."
            )
        if conn.execute(
            select(t.views.c.view_id).where(t.views.c.name == name, t.views.c.dropped_at.is_(None))
        ).first():
            raise ObjectExistsError(
                f"View {name!r} already exists; use CREATE OR REPLACE {kind} or another name."
            )
        if conn.execute(
            select(t.streams.c.stream_id).where(
                t.streams.c.name == name, t.streams.c.dropped_at.is_(None)
            )
        ).first():
            raise ObjectExistsError(
                f"Stream {name!r} already exists; use CREATE OR REPLACE {kind} or another name."
            )

    def create_table(
        self,
        name: str,
        schema: TableSchema,
        *,
        properties: dict[str, str],
        statement_id: str,
        now: float,
        replace: bool = False,
        if_not_exists: bool = False,
        added: Sequence[DataFile] = (),
        operation: str = "CREATE TABLE",
        advances: Sequence[StreamAdvance] = (),
    ) -> TableInfo:
        """Create ``name`` at version 0, holding ``added`` files (CREATE TABLE AS SELECT), and
        consume the streams its query read."""
        name = name.lower()
        with self._write() as conn:
            existing = conn.execute(
                select(t.tables).where(t.tables.c.name == name, t.tables.c.dropped_at.is_(None))
            ).first()
            if existing is not None and if_not_exists:
                return self._table_info(existing)  # nothing written, so no stream consumed
            for advance in sorted(advances, key=lambda a: a.stream_id):
                self._advance_stream(conn, advance, now=now)
            if existing is not None and replace:
                self._check_no_dependents(conn, name, action="replace")
                conn.execute(
                    t.tables.update()
                    .where(t.tables.c.table_id == existing.table_id)
                    .values(dropped_at=now)
                )
            else:
                self._check_name_free(conn, name, kind="TABLE")
            table_id = conn.execute(
                t.tables.insert().values(
                    name=name,
                    current_version=0,
                    next_row_id=0,
                    created_at=now,
                    properties=json.dumps(properties, sort_keys=True),
                )
            ).inserted_primary_key[0]
            self._insert_columns(conn, table_id, schema, begin_version=0)
            next_row_id = self._insert_files(conn, table_id, added, version=0, next_row_id=0)
            conn.execute(
                t.tables.update()
                .where(t.tables.c.table_id == table_id)
                .values(next_row_id=next_row_id)
            )
            conn.execute(
                t.versions.insert().values(
                    table_id=table_id,
                    version=0,
                    committed_at=now,
                    operation=operation,
                    statement_id=statement_id,
                    rows_inserted=sum(f.row_count for f in added),
                    rows_updated=0,
                    rows_deleted=0,
                    files_added=len(added),
                    files_removed=0,
                )
            )
            row = conn.execute(select(t.tables).where(t.tables.c.table_id == table_id)).one()
        return self._table_info(row)

    def _insert_columns(
        self, conn: Connection, table_id: int, schema: TableSchema, *, begin_version: int
    ) -> None:
        conn.execute(
            t.columns.insert(),
            [
                {
                    "table_id": table_id,
                    "column_id": c.column_id,
                    "begin_version": begin_version,
                    "end_version": None,
                    "ordinal": i,
                    "name": c.name,
                    "type": c.type,
                    "nullable": c.nullable,
                }
                for i, c in enumerate(schema.columns)
            ],
        )

    def drop_table(self, name: str, *, now: float, if_exists: bool = False) -> TableInfo | None:
        name = name.lower()
        with self._write() as conn:
            row = conn.execute(
                select(t.tables).where(t.tables.c.name == name, t.tables.c.dropped_at.is_(None))
            ).first()
            if row is None:
                if if_exists:
                    return None
                raise TableNotFoundError(
                    f"Table {name!r} does not exist.{did_you_mean(name, self.object_names())}"
                )
            self._check_no_dependents(conn, name, action="drop")
            conn.execute(
                t.tables.update().where(t.tables.c.table_id == row.table_id).values(dropped_at=now)
            )
            conn.execute(
                t.streams.update()
                .where(t.streams.c.table_id == row.table_id, t.streams.c.dropped_at.is_(None))
                .values(dropped_at=now)
            )
        return self._table_info(row)

    def _check_no_dependents(self, conn: Connection, name: str, *, action: str) -> None:
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

    def rename_table(self, name: str, new_name: str) -> None:
        name, new_name = name.lower(), new_name.lower()
        with self._write() as conn:
            row = conn.execute(
                select(t.tables).where(t.tables.c.name == name, t.tables.c.dropped_at.is_(None))
            ).first()
            if row is None:
                raise TableNotFoundError(f"Table {name!r} does not exist.")
            self._check_no_dependents(conn, name, action="rename")
            self._check_name_free(conn, new_name, kind="TABLE")
            conn.execute(
                t.tables.update().where(t.tables.c.table_id == row.table_id).values(name=new_name)
            )

    def set_properties(self, table_id: int, updates: dict[str, str]) -> TableInfo:
        with self._write() as conn:
            row = conn.execute(select(t.tables).where(t.tables.c.table_id == table_id)).one()
            props = json.loads(row.properties) | updates
            conn.execute(
                t.tables.update()
                .where(t.tables.c.table_id == table_id)
                .values(properties=json.dumps(props, sort_keys=True))
            )
            row = conn.execute(select(t.tables).where(t.tables.c.table_id == table_id)).one()
        return self._table_info(row)

    def alter_schema(
        self,
        table_id: int,
        schema: TableSchema,
        *,
        operation: str,
        statement_id: str,
        now: float,
    ) -> int:
        """Commit a new version whose schema is ``schema``; returns the version."""
        with self._write() as conn:
            row = self._lock_table(conn, table_id)
            version = row.current_version + 1
            conn.execute(
                t.columns.update()
                .where(t.columns.c.table_id == table_id, t.columns.c.end_version.is_(None))
                .values(end_version=version)
            )
            self._insert_columns(conn, table_id, schema, begin_version=version)
            self._insert_version(conn, table_id, version, operation, statement_id, now)
            conn.execute(
                t.tables.update()
                .where(t.tables.c.table_id == table_id)
                .values(current_version=version)
            )
        return version

    def schema_at(self, table_id: int, version: int) -> TableSchema:
        with self._read() as conn:
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

    # -- versions -----------------------------------------------------------------------------

    @staticmethod
    def _version_info(row: Any) -> VersionInfo:
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
        )

    def versions(
        self, table_id: int, *, after_exclusive: int = -1, upto_inclusive: int | None = None
    ) -> list[VersionInfo]:
        query = select(t.versions).where(
            t.versions.c.table_id == table_id, t.versions.c.version > after_exclusive
        )
        if upto_inclusive is not None:
            query = query.where(t.versions.c.version <= upto_inclusive)
        with self._read() as conn:
            rows = conn.execute(query.order_by(t.versions.c.version)).all()
        return [self._version_info(r) for r in rows]

    def version_info(self, table_id: int, version: int) -> VersionInfo | None:
        with self._read() as conn:
            row = conn.execute(
                select(t.versions).where(
                    t.versions.c.table_id == table_id, t.versions.c.version == version
                )
            ).first()
        return None if row is None else self._version_info(row)

    def version_as_of(self, table_id: int, timestamp: float, *, inclusive: bool) -> int | None:
        """The last version committed at or before (``inclusive``) or before ``timestamp``."""
        cmp = (
            t.versions.c.committed_at <= timestamp
            if inclusive
            else t.versions.c.committed_at < timestamp
        )
        with self._read() as conn:
            return conn.execute(
                select(func.max(t.versions.c.version)).where(t.versions.c.table_id == table_id, cmp)
            ).scalar()

    def statement_commit(self, statement_id: str) -> tuple[dict[int, int], float] | None:
        """For a committed statement: the version it made per table, and its commit time."""
        with self._read() as conn:
            rows = conn.execute(
                select(
                    t.versions.c.table_id, t.versions.c.version, t.versions.c.committed_at
                ).where(t.versions.c.statement_id == statement_id)
            ).all()
        if not rows:
            return None
        return {r.table_id: r.version for r in rows}, rows[0].committed_at

    # -- files --------------------------------------------------------------------------------

    @staticmethod
    def _live_at(version: int) -> Any:
        return and_(
            t.files.c.begin_version <= version,
            or_(t.files.c.end_version.is_(None), t.files.c.end_version > version),
        )

    def snapshot_files(self, table_id: int, version: int) -> list[LiveFile]:
        """The data files live at ``version``, each with its deletion vector parts at that version."""
        with self._read() as conn:
            file_rows = conn.execute(
                select(t.files)
                .where(t.files.c.table_id == table_id, self._live_at(version))
                .order_by(t.files.c.file_id)
            ).all()
            dv_rows = conn.execute(
                select(t.deletes.c.file_id, t.deletes.c.dv_path, t.deletes.c.row_count)
                .join(t.files, t.files.c.file_id == t.deletes.c.file_id)
                .where(
                    t.deletes.c.table_id == table_id,
                    t.deletes.c.version <= version,
                    self._live_at(version),
                )
                .order_by(t.deletes.c.version)
            ).all()
        dvs: dict[int, list[Any]] = defaultdict(list)
        for r in dv_rows:
            dvs[r.file_id].append(r)
        return [
            LiveFile(
                file=_data_file(r),
                dv_paths=tuple(d.dv_path for d in dvs[r.file_id]),
                deleted_rows=sum(d.row_count for d in dvs[r.file_id]),
            )
            for r in file_rows
        ]

    def files_changed_between(
        self, table_id: int, *, start_exclusive: int, end_inclusive: int
    ) -> list[TrackedFile]:
        """Files added, removed or given deletion vectors by versions in the interval, each with
        all its DV parts up to ``end_inclusive``. Cost follows the files the interval touched."""
        s, e = start_exclusive, end_inclusive
        with self._read() as conn:
            dv_file_ids = select(t.deletes.c.file_id).where(
                t.deletes.c.table_id == table_id, t.deletes.c.version > s, t.deletes.c.version <= e
            )
            file_rows = conn.execute(
                select(t.files, t.files.c.end_version.label("removed_at"))
                .where(
                    t.files.c.table_id == table_id,
                    or_(
                        and_(t.files.c.begin_version > s, t.files.c.begin_version <= e),
                        and_(t.files.c.end_version > s, t.files.c.end_version <= e),
                        t.files.c.file_id.in_(dv_file_ids),
                    ),
                )
                .order_by(t.files.c.file_id)
            ).all()
            ids = [r.file_id for r in file_rows]
            dv_rows = (
                conn.execute(
                    select(
                        t.deletes.c.file_id,
                        t.deletes.c.version,
                        t.deletes.c.dv_path,
                        t.deletes.c.row_count,
                    )
                    .where(t.deletes.c.file_id.in_(ids), t.deletes.c.version <= e)
                    .order_by(t.deletes.c.version)
                ).all()
                if ids
                else []
            )
        dvs: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
        for d in dv_rows:
            dvs[d.file_id].append((d.version, d.dv_path, d.row_count))
        return [
            TrackedFile(_data_file(r), r.removed_at, tuple(dvs[r.file_id])) for r in file_rows
        ]

    def all_file_paths(self, table_id: int) -> list[tuple[str, int | None, list[str]]]:
        """Every registered data file: (path, end_version, its DV paths) — for vacuum."""
        with self._read() as conn:
            rows = conn.execute(
                select(t.files.c.file_id, t.files.c.path, t.files.c.end_version).where(
                    t.files.c.table_id == table_id
                )
            ).all()
            dv_rows = conn.execute(
                select(t.deletes.c.file_id, t.deletes.c.dv_path).where(
                    t.deletes.c.table_id == table_id
                )
            ).all()
        dvs: dict[int, list[str]] = defaultdict(list)
        for d in dv_rows:
            dvs[d.file_id].append(d.dv_path)
        return [(r.path, r.end_version, dvs[r.file_id]) for r in rows]

    def forget_files(self, table_id: int, paths: Sequence[str], *, vacuumed_before: int) -> None:
        """Drop the catalog rows of vacuumed files; versions before ``vacuumed_before`` are gone."""
        with self._write() as conn:
            if paths:
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
            conn.execute(
                t.tables.update()
                .where(t.tables.c.table_id == table_id)
                .values(
                    vacuumed_before_version=func.max(
                        t.tables.c.vacuumed_before_version, vacuumed_before
                    )
                    if not self._is_postgres
                    else func.greatest(t.tables.c.vacuumed_before_version, vacuumed_before)
                )
            )

    # -- commit -------------------------------------------------------------------------------

    def _lock_table(self, conn: Connection, table_id: int) -> Any:
        query = select(t.tables).where(t.tables.c.table_id == table_id)
        if self._is_postgres:
            query = query.with_for_update()
        row = conn.execute(query).first()
        if row is None or row.dropped_at is not None:
            raise ConflictError(
                f"Table {row.name if row else table_id} was dropped or replaced by a concurrent"
                " statement; this statement changed nothing."
            )
        return row

    def _insert_version(
        self,
        conn: Connection,
        table_id: int,
        version: int,
        operation: str,
        statement_id: str,
        now: float,
        commit: TableCommit | None = None,
    ) -> None:
        conn.execute(
            t.versions.insert().values(
                table_id=table_id,
                version=version,
                committed_at=now,
                operation=operation,
                statement_id=statement_id,
                rows_inserted=commit.rows_inserted if commit else 0,
                rows_updated=commit.rows_updated if commit else 0,
                rows_deleted=commit.rows_deleted if commit else 0,
                files_added=len(commit.added) if commit else 0,
                files_removed=len(commit.removed_paths) if commit else 0,
            )
        )

    def _insert_files(
        self,
        conn: Connection,
        table_id: int,
        added: Sequence[DataFile],
        *,
        version: int,
        next_row_id: int,
    ) -> int:
        rows = []
        for f in added:
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
                }
            )
        if rows:
            conn.execute(t.files.insert(), rows)
        return next_row_id

    def allocate_row_ids(self, table_id: int, count: int) -> int:
        """Reserve ``count`` row ids (for files staged in an open transaction); returns the base."""
        with self._write() as conn:
            row = self._lock_table(conn, table_id)
            conn.execute(
                t.tables.update()
                .where(t.tables.c.table_id == table_id)
                .values(next_row_id=row.next_row_id + count)
            )
        return int(row.next_row_id)

    def commit(
        self,
        commits: Sequence[TableCommit],
        *,
        now: float,
        advances: Sequence[StreamAdvance] = (),
    ) -> dict[int, list[int]]:
        """Commit statements and stream frontier moves atomically; returns new versions per table.

        Concurrent appends never conflict. A commit that deletes or rewrites rows of a file fails
        with ConflictError if a version committed after its read version touched the same file.
        A stream advance fails with StreamConsumedError if another transaction moved it first.
        """
        by_table: dict[int, list[TableCommit]] = defaultdict(list)
        for c in commits:
            by_table[c.table_id].append(c)
        result: dict[int, list[int]] = {}
        with self._write() as conn:
            # in a fixed order, so two commits consuming the same streams cannot deadlock
            for advance in sorted(advances, key=lambda a: a.stream_id):
                self._advance_stream(conn, advance, now=now)
            for table_id in sorted(by_table):
                result[table_id] = self._commit_table(conn, by_table[table_id], now=now)
        return result

    def _advance_stream(self, conn: Connection, advance: StreamAdvance, *, now: float) -> None:
        moved = conn.execute(
            t.streams.update()
            .where(
                t.streams.c.stream_id == advance.stream_id,
                t.streams.c.dropped_at.is_(None),
                t.streams.c.frontier_version == advance.expected_frontier,
                t.streams.c.initial_consumed == advance.expected_initial_consumed,
            )
            .values(frontier_version=advance.new_frontier, initial_consumed=True, consumed_at=now)
        ).rowcount
        if moved != 1:
            raise StreamConsumedError(
                f"Stream {advance.stream_name} was consumed concurrently by another transaction"
                " (or dropped) after this statement read it; this statement changed nothing."
                " Run it again to consume the changes that remain."
            )

    def _commit_table(
        self, conn: Connection, commits: list[TableCommit], *, now: float
    ) -> list[int]:
        first = commits[0]
        row = self._lock_table(conn, first.table_id)
        current = row.current_version
        staged = {f.path for c in commits for f in c.added}
        touched = {p for c in commits for p in c.removed_paths} | {
            d.file_path for c in commits for d in c.deletes
        }
        touched -= staged
        if touched and current != first.read_version:
            self._check_conflicts(conn, first, touched)
        committed_at = max(now, self._last_commit_time(conn, first.table_id))
        next_row_id = row.next_row_id
        made = []
        for c in commits:
            current += 1
            next_row_id = self._insert_files(
                conn, c.table_id, c.added, version=current, next_row_id=next_row_id
            )
            if c.removed_paths:
                conn.execute(
                    t.files.update()
                    .where(
                        t.files.c.table_id == c.table_id,
                        t.files.c.path.in_(list(c.removed_paths)),
                        t.files.c.end_version.is_(None),
                    )
                    .values(end_version=current)
                )
            if c.deletes:
                ids = dict(
                    conn.execute(
                        select(t.files.c.path, t.files.c.file_id).where(
                            t.files.c.table_id == c.table_id,
                            t.files.c.path.in_([d.file_path for d in c.deletes]),
                        )
                    ).all()
                )
                conn.execute(
                    t.deletes.insert(),
                    [
                        {
                            "table_id": c.table_id,
                            "file_id": ids[d.file_path],
                            "version": current,
                            "dv_path": d.dv_path,
                            "row_count": d.row_count,
                        }
                        for d in c.deletes
                    ],
                )
            self._insert_version(
                conn, c.table_id, current, c.operation, c.statement_id, committed_at, c
            )
            made.append(current)
        conn.execute(
            t.tables.update()
            .where(t.tables.c.table_id == first.table_id)
            .values(current_version=current, next_row_id=next_row_id)
        )
        return made

    def _last_commit_time(self, conn: Connection, table_id: int) -> float:
        return (
            conn.execute(
                select(func.max(t.versions.c.committed_at)).where(t.versions.c.table_id == table_id)
            ).scalar()
            or 0.0
        )

    def _check_conflicts(self, conn: Connection, commit: TableCommit, touched: set[str]) -> None:
        paths = list(touched)
        removed = (
            conn.execute(
                select(t.files.c.end_version).where(
                    t.files.c.table_id == commit.table_id,
                    t.files.c.path.in_(paths),
                    t.files.c.end_version.is_not(None),
                )
            )
            .scalars()
            .first()
        )
        deleted = (
            conn.execute(
                select(t.deletes.c.version)
                .join(t.files, t.files.c.file_id == t.deletes.c.file_id)
                .where(
                    t.deletes.c.table_id == commit.table_id,
                    t.deletes.c.version > commit.read_version,
                    t.files.c.path.in_(paths),
                )
            )
            .scalars()
            .first()
        )
        version = removed if removed is not None else deleted
        if version is not None:
            raise ConflictError(
                f"Conflict on table {commit.table_name}: version {version}, committed by a"
                f" concurrent statement after this one read version {commit.read_version},"
                " changed the same rows. This statement changed nothing; run it again."
            )

    # -- streams ------------------------------------------------------------------------------

    @staticmethod
    def _stream_info(row: Any) -> StreamInfo:
        return StreamInfo(
            stream_id=row.stream_id,
            name=row.name,
            table_id=row.table_id,
            frontier_version=row.frontier_version,
            append_only=row.append_only,
            show_initial_rows=row.show_initial_rows,
            initial_consumed=row.initial_consumed,
            comment=row.comment,
            created_at=row.created_at,
            consumed_at=row.consumed_at,
        )

    def find_stream(self, name: str) -> StreamInfo | None:
        with self._read() as conn:
            row = conn.execute(
                select(t.streams).where(
                    t.streams.c.name == name.lower(), t.streams.c.dropped_at.is_(None)
                )
            ).first()
        return None if row is None else self._stream_info(row)

    def stream(self, name: str) -> StreamInfo:
        found = self.find_stream(name)
        if found is None:
            raise StreamNotFoundError(
                f"Stream {name!r} does not exist.{did_you_mean(name, self.stream_names())}"
                " SHOW STREAMS lists the streams."
            )
        return found

    def stream_names(self) -> list[str]:
        with self._read() as conn:
            return list(
                conn.execute(
                    select(t.streams.c.name).where(t.streams.c.dropped_at.is_(None))
                ).scalars()
            )

    def list_streams(self, *, table_id: int | None = None) -> list[StreamInfo]:
        query = select(t.streams).where(t.streams.c.dropped_at.is_(None))
        if table_id is not None:
            query = query.where(t.streams.c.table_id == table_id)
        with self._read() as conn:
            rows = conn.execute(query.order_by(t.streams.c.name)).all()
        return [self._stream_info(r) for r in rows]

    def create_stream(
        self,
        name: str,
        *,
        table_id: int,
        frontier_version: int,
        append_only: bool,
        show_initial_rows: bool,
        comment: str,
        now: float,
        replace: bool,
        if_not_exists: bool = False,
    ) -> StreamInfo:
        name = name.lower()
        with self._write() as conn:
            existing = conn.execute(
                select(t.streams).where(t.streams.c.name == name, t.streams.c.dropped_at.is_(None))
            ).first()
            if existing is not None and if_not_exists:
                return self._stream_info(existing)
            if existing is not None and replace:
                conn.execute(
                    t.streams.update()
                    .where(t.streams.c.stream_id == existing.stream_id)
                    .values(dropped_at=now)
                )
            else:
                self._check_name_free(conn, name, kind="STREAM")
            conn.execute(
                t.streams.insert().values(
                    name=name,
                    table_id=table_id,
                    frontier_version=frontier_version,
                    append_only=append_only,
                    show_initial_rows=show_initial_rows,
                    initial_consumed=False,
                    comment=comment,
                    created_at=now,
                )
            )
            row = conn.execute(
                select(t.streams).where(t.streams.c.name == name, t.streams.c.dropped_at.is_(None))
            ).one()
        return self._stream_info(row)

    def drop_stream(self, name: str, *, now: float, if_exists: bool) -> bool:
        name = name.lower()
        with self._write() as conn:
            moved = conn.execute(
                t.streams.update()
                .where(t.streams.c.name == name, t.streams.c.dropped_at.is_(None))
                .values(dropped_at=now)
            ).rowcount
        if not moved and not if_exists:
            raise StreamNotFoundError(
                f"Stream {name!r} does not exist.{did_you_mean(name, self.stream_names())}"
            )
        return bool(moved)

    # -- views --------------------------------------------------------------------------------

    def create_view(
        self, name: str, sql: str, *, depends_on: Sequence[str], now: float, replace: bool
    ) -> None:
        name = name.lower()
        with self._write() as conn:
            existing = conn.execute(
                select(t.views.c.view_id).where(
                    t.views.c.name == name, t.views.c.dropped_at.is_(None)
                )
            ).first()
            if existing is not None and replace:
                conn.execute(
                    t.views.update()
                    .where(t.views.c.view_id == existing.view_id)
                    .values(dropped_at=now)
                )
            else:
                self._check_name_free(conn, name, kind="VIEW")
            conn.execute(
                t.views.insert().values(
                    name=name,
                    sql=sql,
                    depends_on=json.dumps(sorted({d.lower() for d in depends_on})),
                    created_at=now,
                )
            )

    def view_sql(self, name: str) -> str | None:
        with self._read() as conn:
            return conn.execute(
                select(t.views.c.sql).where(
                    t.views.c.name == name.lower(), t.views.c.dropped_at.is_(None)
                )
            ).scalar()

    def list_views(self) -> list[tuple[str, str, float]]:
        with self._read() as conn:
            rows = conn.execute(
                select(t.views.c.name, t.views.c.sql, t.views.c.created_at)
                .where(t.views.c.dropped_at.is_(None))
                .order_by(t.views.c.name)
            ).all()
        return [(r.name, r.sql, r.created_at) for r in rows]

    def drop_view(self, name: str, *, now: float, if_exists: bool) -> bool:
        name = name.lower()
        with self._write() as conn:
            row = conn.execute(
                select(t.views.c.view_id).where(
                    t.views.c.name == name, t.views.c.dropped_at.is_(None)
                )
            ).first()
            if row is None:
                if if_exists:
                    return False
                raise TableNotFoundError(
                    f"View {name!r} does not exist.{did_you_mean(name, self.object_names())}"
                )
            self._check_no_dependents(conn, name, action="drop")
            conn.execute(
                t.views.update().where(t.views.c.view_id == row.view_id).values(dropped_at=now)
            )
        return True


def _data_file(row: Any) -> DataFile:
    return DataFile(
        path=row.path,
        row_count=row.row_count,
        size_bytes=row.size_bytes,
        base_row_id=row.base_row_id,
        begin_version=row.begin_version,
        stats=json.loads(row.stats),
    )


def registered_paths(catalog: Catalog) -> set[str]:
    """Every data and DV file path any table (live or dropped) still references."""
    with catalog._read() as conn:
        paths = set(conn.execute(select(t.files.c.path)).scalars())
        paths |= set(conn.execute(select(t.deletes.c.dv_path)).scalars())
    return paths


def removal_times(catalog: Catalog, table_id: int) -> dict[int, float]:
    """Commit time of every version that removed a file of the table."""
    with catalog._read() as conn:
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
