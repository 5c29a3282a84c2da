"""Binding a query over changelake tables, views and streams to one Spark DataFrame.

Each table reference is replaced by a placeholder bound to a DataFrame (a snapshot, time-travel
or change scan, a stream), views are inlined as subqueries, and Spark SQL plans the rest. What
the query read that a commit must require (streams) is kept on the binder as values.
"""

from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame
from sqlglot import exp

from changelake.catalog.model import TableInfo
from changelake.changes.formats import Commit, render, stamp
from changelake.changes.plan import Shape
from changelake.changes.query import changes_between, resolve_interval
from changelake.dialect import parse_one, to_spark
from changelake.errors import (
    ExternalTableError,
    InvalidStatementError,
    TableNotFoundError,
    did_you_mean,
)
from changelake.plan.counted import whole_count
from changelake.plan.points import changes_clause, point_of, rendering_of
from changelake.plan.predicates import check_scope, reference_predicate
from changelake.plan.pushdown import pushable_conjuncts
from changelake.plan.streams import has_data, read_stream
from changelake.plan.views import view_at, view_changes
from changelake.runtime.env import Context
from changelake.spark.errors import translate_analysis
from changelake.spark.relation import Relation, leaves_of
from changelake.storage.pruning import prune
from changelake.storage.snapshot import state_relation
from changelake.streams.frontier import StreamRead
from changelake.txn.points import resolve
from changelake.txn.snapshot import TableState

_PLACEHOLDER = "__cl_ref_{}__"


class Binder:
    """Binds the table references of one statement's queries to DataFrames."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.bindings: dict[str, Relation] = {}
        self.names: dict[str, str] = {}  # placeholder -> what the user wrote
        self.stream_reads: dict[int, StreamRead] = {}
        self._live_rows: dict[str, int] = {}  # placeholder -> rows, of whole table states
        self._view_stack: list[str] = []

    # -- entry points -------------------------------------------------------------------------

    def query(self, tree: exp.Expression) -> DataFrame:
        """A lazy DataFrame for a query expression (SELECT, UNION, VALUES, ...)."""
        return self.run(self.bind(tree.copy()))

    def bind(self, tree: exp.Expression) -> exp.Expression:
        """Replace table references in ``tree`` by placeholders bound to DataFrames."""
        if isinstance(tree, exp.Table) and tree.parent is None:
            # a bare reference (MERGE ... USING t) is replaced in place, so it needs a parent
            return self.bind(exp.Paren(this=tree)).this
        tree = self._fold_stream_functions(tree)
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        for table in list(tree.find_all(exp.Table)):
            if not isinstance(table.this, exp.Identifier) or table.args.get("db"):
                continue
            if table.name.lower() in ctes and not table.args.get("when"):
                continue
            self._bind_table(table)
        return tree

    def bind_dataframe(self, df: DataFrame, label: str) -> str:
        """Register ``df`` under a fresh placeholder; returns the placeholder name."""
        return self.bind_relation(Relation.of_frame(df), label)

    def bind_relation(self, rel: Relation, label: str) -> str:
        """Register ``rel`` under a fresh placeholder; returns the placeholder name."""
        name = _PLACEHOLDER.format(len(self.bindings))
        self.bindings[name] = rel
        self.names[name] = label
        return name

    def run(self, tree: exp.Expression) -> DataFrame:
        """The query ``tree`` as one plan: each placeholder is its relation's query, and the
        JVM analyses the whole once (``Relation.frame``)."""
        try:
            return self.relation(tree).frame(self.ctx.spark)
        except AnalysisException as e:
            raise translate_analysis(e, names=self.names) from e

    def relation(self, tree: exp.Expression) -> Relation:
        """The query ``tree`` with its placeholders' relations in place (its columns unknown)."""
        text = to_spark(tree)
        whole = self._whole_table(text) or whole_count(tree, self._live_rows)
        if whole is not None:
            return whole
        used = {k: v for k, v in self.bindings.items() if k in text}
        for name, rel in used.items():
            text = text.replace(name, f"({rel.sql})")
        return Relation(text, (), leaves_of(used))

    def _whole_table(self, text: str) -> Relation | None:
        """The bound relation itself when ``text`` is ``SELECT * FROM`` one placeholder."""
        for name, rel in self.bindings.items():
            if text == f"SELECT * FROM {name}" or text.startswith(f"SELECT * FROM {name} AS "):
                alias = text.removeprefix(f"SELECT * FROM {name}").removeprefix(" AS ")
                if alias == "" or alias.replace("_", "").isalnum():
                    return rel
        return None

    # -- tables -------------------------------------------------------------------------------

    def _check_scope(self, info: TableInfo, table: exp.Table) -> None:
        """An external table with SCOPE = DEPENDENTS may be read only within its scope; a
        time-travel read within the scope the version it reads had (the rows it holds)."""
        catalog = self.ctx.catalog
        ext = catalog.find_external_table(info.name)
        if ext is None or ext.definition.scope_mode != "DEPENDENTS":
            return
        types = ext.definition.column_types
        predicate = reference_predicate(table, types)
        when = table.args.get("when")
        if when is None:
            check_scope(ext.name, ext.scope, predicate, types=types)
            return
        version = resolve(self.ctx, info, point_of(self.ctx.spark, when))
        record = catalog.external_scope_of_version(info.table_id, version)
        if record is None:
            raise ExternalTableError(
                f"External table {ext.name} (SCOPE = DEPENDENTS) has no recorded scope at"
                f" version {version}: the version is older than the catalog's record of scopes,"
                " so which rows it held is not known. Read a later version."
            )
        at = f" at version {version}"
        check_scope(ext.name, record.scope, predicate, types=types, at=at)

    def _bind_table(self, table: exp.Table) -> None:
        name = table.name
        if name in self.bindings:
            return
        alias = table.alias or name
        catalog = self.ctx.catalog
        info = catalog.find_table(name)
        if info is not None:
            if info.is_external():
                self._check_scope(info, table)
            rel, live_rows = self._table_read(info, table)
            placeholder = self._replace(table, rel, alias, label=name)
            if live_rows is not None:
                self._live_rows[placeholder] = live_rows
            return
        view_sql = catalog.view_sql(name)
        if view_sql is not None:
            changes, when = table.args.get("changes"), table.args.get("when")
            if changes is not None:
                information, start, end = changes_clause(self.ctx.spark, changes)
                rel, _ = view_changes(
                    self.ctx,
                    name,
                    start=start,
                    end=end,
                    information=information,
                )
                rendering = rendering_of(changes)
                if rendering is not None:
                    rendered = render(rel.frame(self.ctx.spark), rendering, Commit(name.lower()))
                    rel = Relation.of_frame(rendered)
                self._replace(table, rel, alias, label=name)
                return
            if when is not None:
                at = view_at(self.ctx, name, point_of(self.ctx.spark, when))
                self._replace(table, at, alias, label=name)
                return
            if name.lower() in self._view_stack:
                raise InvalidStatementError(f"View {name} refers to itself.")
            self._view_stack.append(name.lower())
            inner = self.bind(parse_one(view_sql))
            self._view_stack.pop()
            table.replace(
                exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))
            )
            return
        stream = catalog.find_stream(name)
        if stream is not None:
            changes = table.args.get("changes")
            rendering = rendering_of(changes) if changes is not None else None
            ordered = rendering is not None and rendering.row_by_row and not stream.on_view
            if table.args.get("when") or (changes is not None and _reads_interval(changes)):
                raise InvalidStatementError(
                    f"{name} is a stream: it reads its own interval; drop AT/BEFORE and"
                    " INFORMATION (CHANGES (FORMAT => ...) alone renders it as a changelog)."
                )
            rel, read = read_stream(self.ctx, name, ordered=ordered)
            self.stream_reads.setdefault(read.stream.stream_id, read)
            if rendering is not None:
                stamped = self._stamp(read.stream.view or read.stream.table_id, read)
                rendered = render(rel.frame(self.ctx.spark), rendering, stamped, ordered=ordered)
                rel = Relation.of_frame(rendered)
            self._replace(table, rel, alias, label=name)
            return
        if self.ctx.spark.catalog.tableExists(name):
            return  # a Spark temp view or table of the user's own
        known = catalog.object_names() + catalog.stream_names()
        raise TableNotFoundError(
            f"Table, view or stream {name!r} does not exist.{did_you_mean(name, known)}"
            " SHOW TABLES and SHOW STREAMS list what exists."
        )

    def _table_read(self, info: TableInfo, table: exp.Table) -> tuple[Relation, int | None]:
        """The rows (or changes) of ``info`` that the reference ``table`` asks for, and how
        many rows they are when that is known without reading them (a whole table state)."""
        changes = table.args.get("changes")
        if changes is not None:
            information, start, end = changes_clause(self.ctx.spark, changes)
            first, last = resolve_interval(self.ctx, info, start=start, end=end)
            rel = changes_between(
                self.ctx,
                info,
                start=first,
                end=last,
                information=information,
                rendering=rendering_of(changes),
            )
            return rel, None
        when = table.args.get("when")
        version = resolve(self.ctx, info, point_of(self.ctx.spark, when)) if when else None
        state = self.ctx.state(info, version)
        conjuncts = pushable_conjuncts(table)
        if conjuncts:
            pruned = state.with_files(prune(state.files, state.schema, conjuncts))
            return state_relation(self.ctx.spark, self.ctx.warehouse, pruned), None
        live_rows = sum(f.live_rows for f in state.files)
        return state_relation(self.ctx.spark, self.ctx.warehouse, state), live_rows

    def _stamp(self, source: str | int, read: StreamRead) -> Commit:
        """What a stream read's changes are stamped with: for a stream on a table, the version
        it reads up to and that version's commit time."""
        if isinstance(source, str):
            return Commit(source)
        info = self.ctx.catalog.table_by_id(source)
        (_, version), *_ = read.ends
        initial = read.plan is not None and read.plan.shape is Shape.INITIAL_ROWS
        return stamp(self.ctx.catalog, info, version, initial_rows=initial)

    def target(
        self, state: TableState, label: str, *, identity: bool = False, late: bool = False
    ) -> str:
        """Bind ``state`` of a write statement's target with its hidden address columns (and
        identity columns if ``identity``); ``late``: see ``Scan.late``."""
        rel = state_relation(
            self.ctx.spark, self.ctx.warehouse, state, address=True, identity=identity, late=late
        )
        return self.bind_relation(rel, label)

    def _replace(self, table: exp.Table, rel: Relation, alias: str, *, label: str) -> str:
        """Put a placeholder bound to ``rel`` in place of ``table``; returns its name."""
        placeholder = self.bind_relation(rel, label)
        table.replace(
            exp.Table(
                this=exp.to_identifier(placeholder),
                alias=exp.TableAlias(this=exp.to_identifier(alias)),
            )
        )
        return placeholder

    def _fold_stream_functions(self, tree: exp.Expression) -> exp.Expression:
        """Evaluate SYSTEM$STREAM_HAS_DATA('s') from metadata into a boolean literal."""

        def is_call(node: exp.Expression) -> bool:
            return isinstance(node, exp.Anonymous) and node.name.upper() == "SYSTEM$STREAM_HAS_DATA"

        def fold(node: exp.Expression) -> exp.Expression:
            if not is_call(node):
                return node
            args = node.expressions
            if len(args) != 1 or not isinstance(args[0], exp.Literal) or not args[0].is_string:
                raise InvalidStatementError("SYSTEM$STREAM_HAS_DATA takes one stream name: 'name'.")
            return exp.Boolean(this=has_data(self.ctx, args[0].this))

        if not any(is_call(n) for n in tree.find_all(exp.Anonymous)):
            return tree
        return tree.transform(fold, copy=False)


def _reads_interval(changes: exp.Changes) -> bool:
    return any(changes.args.get(k) is not None for k in ("information", "at_before", "end"))
