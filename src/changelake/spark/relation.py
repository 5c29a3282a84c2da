"""A statement's plan as one SQL text over named leaves, handed to the JVM in one call.

A ``Relation`` is a query (SQL text) with its output columns and the leaves it reads: changelake
reads of Parquet files (``Read``: described compactly, built in the JVM) or DataFrames built
before. Its steps (``select``, ``where``, ``join``, ``union``, ``query``) only compose text in
Python; ``frame`` makes the DataFrame: the JVM builds the reads, parses the text, puts the
leaves in place and analyses the plan once (``Frames.plan``). Building the same plan with
DataFrame calls made Spark analyse a new, growing plan at every step (bench/ANALYSIS.md).

Leaf names are unique in the process, so relations built apart combine without renaming.
"""

from __future__ import annotations

import itertools
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyspark.errors import IllegalArgumentException
from pyspark.sql import DataFrame, SparkSession

from changelake.errors import InvalidStatementError
from changelake.schema import quoted
from changelake.spark.private import (
    frame_of,
    jvm_class,
    jvm_frame,
    jvm_session,
    physical_plan_lines,
)

# Plans whose inputs hold at most this many bytes (a Spark conf key; 0: none) run without
# adaptive execution, with one shuffle partition, without broadcast joins and with interpreted
# expressions (``Frames``): on a few rows AQE and broadcasts only split a plan into more jobs,
# more partitions only add tasks, and generated code is compiled to run once.
SMALL_INPUT = "spark.changelake.smallInputBytes"
DEFAULT_SMALL_INPUT = 8 << 20  # Frames.DEFAULT_SMALL_INPUT
_FRAMES = "io.changelake.spark.Frames"
_names = itertools.count()
_LEAF = "__cl_leaf{}__"


@dataclass(frozen=True)
class Read:
    """A read of Parquet files with changelake's file format (``native.read_relation``)."""

    uris: tuple[str, ...]
    schema: str  # JSON of the StructType: physical and virtual columns
    table: bytes  # the reader's per-file table
    positions: bool  # whether any file has positions to skip
    sizes: tuple[int, ...] = ()  # each file's size in bytes, where the catalog knows them
    late: bool = False  # a filter over it is evaluated in the reader first (``Scan.late``)


Leaf = Read | DataFrame


def _files(read: Read) -> str:
    """The files of ``read`` as ``Frames.plan`` takes them: a line each, with its size if known."""
    if read.sizes:
        return "\n".join(f"{u}\t{n}" for u, n in zip(read.uris, read.sizes, strict=True))
    return "\n".join(read.uris)


def _fresh(prefix: str = "_q") -> str:
    return f"{prefix}{next(_names)}"


_ALIASED = re.compile(r"(?is)^.*\sAS\s+(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_$]*)\s*$")
_NAMED = re.compile(r"(?s)^(?:[A-Za-z_][A-Za-z0-9_$]*\.)?(`(?:[^`]|``)+`|[A-Za-z_][A-Za-z0-9_$]*)$")


def output_name(expression: str) -> str:
    """The name of the column ``expression`` (``expr AS name``, a column, ``q.column``)."""
    text = expression.strip()
    match = _ALIASED.match(text) or _NAMED.match(text)
    if match is None:
        raise ValueError(f"an expression of a relation needs a name (… AS name): {expression!r}")
    name = match.group(1)
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


@dataclass(frozen=True, eq=False)  # leaves may be DataFrames, whose == builds a Column
class Relation:
    """A query (``sql``) over ``leaves`` (name -> leaf) with the output ``columns``."""

    sql: str
    columns: tuple[str, ...]
    leaves: tuple[tuple[str, Leaf], ...] = ()

    # -- building -----------------------------------------------------------------------------

    @staticmethod
    def of_read(read: Read, columns: Sequence[str]) -> Relation:
        """All columns of ``read`` (``columns``: its schema's names, physical and virtual)."""
        name = _LEAF.format(next(_names))
        return Relation(f"SELECT * FROM {name} AS {_fresh()}", tuple(columns), ((name, read),))

    @staticmethod
    def of_frame(df: DataFrame, columns: Sequence[str] | None = None) -> Relation:
        """All columns of the DataFrame ``df`` (``columns``: its columns, when known)."""
        name = _LEAF.format(next(_names))
        names = tuple(df.columns if columns is None else columns)
        return Relation(f"SELECT * FROM {name} AS {_fresh()}", names, ((name, df),))

    @staticmethod
    def of_sql(sql: str, columns: Sequence[str]) -> Relation:
        """A query with no leaves (VALUES, a literal row, an empty table)."""
        return Relation(sql, tuple(columns))

    @staticmethod
    def query(sql: str, columns: Sequence[str], **inputs: Relation) -> Relation:
        """The query ``sql`` with the output ``columns``, in which ``{name}`` stands for the
        relation ``inputs[name]`` as a FROM item (give it an alias)."""
        parts = {name: f"({rel.sql})" for name, rel in inputs.items()}
        return Relation(sql.format(**parts), tuple(columns), _merged(*inputs.values()))

    def select(self, *expressions: str) -> Relation:
        """``SELECT expressions``; ``*`` stands for this relation's columns."""
        items: list[str] = []
        for e in expressions:
            items.extend(quoted(c) for c in self.columns) if e == "*" else items.append(e)
        names = tuple(output_name(e) for e in items)
        text = f"SELECT {', '.join(items)} FROM ({self.sql}) AS {_fresh()}"
        return Relation(text, names, self.leaves)

    def where(self, condition: str) -> Relation:
        return Relation(
            f"SELECT * FROM ({self.sql}) AS {_fresh()} WHERE {condition}",
            self.columns,
            self.leaves,
        )

    def drop(self, *names: str) -> Relation:
        gone = {n.lower() for n in names}
        return self.select(*[quoted(c) for c in self.columns if c.lower() not in gone])

    def union(self, other: Relation) -> Relation:
        """UNION ALL by name (``other`` has the same columns, in any order)."""
        if [c.lower() for c in other.columns] != [c.lower() for c in self.columns]:
            other = other.select(*[quoted(c) for c in self.columns])
        text = f"SELECT * FROM ({self.sql}) AS {_fresh()} UNION ALL ({other.sql})"
        return Relation(text, self.columns, _merged(self, other))

    def join(
        self,
        other: Relation,
        on: str,
        how: str = "inner",
        *,
        columns: Sequence[str] | None = None,
        hint: str = "",
    ) -> Relation:
        """``self AS _l JOIN other AS _r ON on``; ``columns``: the output (expressions over
        ``_l`` and ``_r``), else every column of both sides (of the left for semi and anti);
        ``hint``: a join hint such as ``BROADCAST(_r)``."""
        kind = {
            "inner": "JOIN",
            "left": "LEFT OUTER JOIN",
            "right": "RIGHT OUTER JOIN",
            "full": "FULL OUTER JOIN",
            "full_outer": "FULL OUTER JOIN",
            "left_semi": "LEFT SEMI JOIN",
            "left_anti": "LEFT ANTI JOIN",
            "cross": "CROSS JOIN",
        }[how]
        if columns is None:
            own = [f"_l.{quoted(c)}" for c in self.columns]
            theirs = (
                []
                if how in ("left_semi", "left_anti")
                else [f"_r.{quoted(c)}" for c in other.columns]
            )
            columns = own + theirs
        condition = "" if how == "cross" else f" ON {on}"
        hinted = f"/*+ {hint} */ " if hint else ""
        text = (
            f"SELECT {hinted}{', '.join(columns)} FROM ({self.sql}) AS _l"
            f" {kind} ({other.sql}) AS _r{condition}"
        )
        return Relation(text, tuple(output_name(c) for c in columns), _merged(self, other))

    # -- running ------------------------------------------------------------------------------

    def frame(self, spark: SparkSession, *, adaptive: bool = True) -> DataFrame:
        """The DataFrame of this relation, built and analysed by the JVM in one call (one more
        per DataFrame leaf). Not ``adaptive``: a large plan runs without adaptive execution too
        (one that shuffles nothing and joins by hinted broadcasts: a job per broadcast only)."""
        reads = [(n, leaf) for n, leaf in self.leaves if isinstance(leaf, Read)]
        frames = [(n, leaf) for n, leaf in self.leaves if not isinstance(leaf, Read)]
        blob = bytearray(struct.pack("<i", len(reads)))
        for name, read in reads:
            blob += _string(name) + _string(_files(read)) + _string(read.schema)
            blob += struct.pack("<i", len(read.table)) + read.table
            blob += bytes([(1 if read.positions else 0) | (2 if read.late else 0)])
        blob += struct.pack("<i", len(frames))
        for name, _ in frames:
            blob += _string(name)
        frames_class = jvm_class(spark, _FRAMES)
        if frames_class is None:  # no JVM piece (no JDK), so no reads either
            return self._formatted(spark, dict(frames))
        try:
            if frames:
                jdf = frames_class.plan(
                    jvm_session(spark), self.sql, bytes(blob), [jvm_frame(f) for _, f in frames]
                )
            else:
                jdf = frames_class.plan(jvm_session(spark), self.sql, bytes(blob))
        except IllegalArgumentException as e:
            if SMALL_INPUT in str(e):  # the user's setting
                raise InvalidStatementError(str(e).split("\n", 1)[0]) from None
            raise
        if not adaptive:
            jdf = frames_class.fixed(jdf)
        return frame_of(spark, jdf)

    def _formatted(self, spark: SparkSession, frames: dict[str, Leaf]) -> DataFrame:
        """The relation by PySpark's own formatting of DataFrames into SQL text, which registers
        each as a temporary view for the analysis: the way without changelake's JVM piece."""
        text = self.sql.replace("{", "{{").replace("}", "}}")
        for name in frames:
            text = text.replace(name, "{" + name + "}")
        return spark.sql(text, **frames)


def small_input_bytes(spark: SparkSession) -> int:
    """The most bytes of stored input ``Relation.frame`` plans as small (``SMALL_INPUT``, as
    the JVM piece reads it; a setting it would refuse counts as the default here)."""
    setting = spark.conf.get(SMALL_INPUT, None)
    try:
        limit = int(str(setting).strip()) if setting is not None else DEFAULT_SMALL_INPUT
    except ValueError:
        return DEFAULT_SMALL_INPUT
    return limit if limit >= 0 else DEFAULT_SMALL_INPUT


def plan_lines(df: DataFrame) -> list[str]:
    """EXPLAIN of ``df``: how ``frame`` chose to run it (by its input's size: ``SMALL_INPUT``;
    where changelake's JVM piece is loaded), then Spark's plan."""
    frames_class = jvm_class(df.sparkSession, _FRAMES)
    chosen = None if frames_class is None else frames_class.choice(jvm_frame(df))
    return ([] if chosen is None else [str(chosen)]) + physical_plan_lines(df)


def _string(text: str) -> bytes:
    encoded = text.encode()
    return struct.pack("<i", len(encoded)) + encoded


def _merged(*relations: Relation) -> tuple[tuple[str, Leaf], ...]:
    seen: dict[str, Leaf] = {}
    for rel in relations:
        for name, leaf in rel.leaves:
            seen.setdefault(name, leaf)
    return tuple(seen.items())


def leaves_of(relations: Mapping[str, Relation]) -> tuple[tuple[str, Leaf], ...]:
    """The leaves of all ``relations``, each once."""
    return _merged(*relations.values())
