"""How an UPDATE, DELETE or MERGE reads its target: in one pass or in two phases, chosen by cost.

Two phases (``matches.py``) read the columns the condition and the new values need from every
candidate file, then every column of only the files that hold a match. One pass reads every
column of every candidate file once and keeps the matched rows with their old values. Each reads
something in vain: two phases read the condition's columns twice in the files with a match; one
pass decodes the other columns of the files without one. Which costs less depends on how many
candidate files hold a match, which only the data can tell: a probe reads the largest candidate
file's condition columns from its start until PROBE_MATCHES rows match (Spark's LIMIT stops the
scan there, so a dense condition is probed in a few batches and only a sparse one reads the whole
file), and the expected number of files with a match follows from that rate, taking matches as
spread independently of files (min/max pruning has already removed what statistics rule out).

Where changelake's reader evaluates the condition itself (a deterministic predicate of the row:
``ReaderCondition.java``), one pass reads the condition's columns first and decodes the other
columns of the matched rows only, so it reads nothing in vain that two phases would not, in one
plan: it is taken without a probe.

A MERGE finds its matches by its join of the source either way; the choice is whether the join
also carries the matched rows' old values and identity (``choose_merge``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from sqlglot import exp

from changelake.catalog.model import LiveFile
from changelake.errors import InvalidStatementError
from changelake.runtime.env import ROW_LEVEL_PLAN, Env
from changelake.schema import TableSchema
from changelake.storage.footers import column_bytes
from changelake.storage.warehouse import Warehouse

MODES = ("auto", "one-pass", "two-phase")
# Candidate files this small are read once: a second Spark read costs more than the bytes saved.
SMALL_BYTES = 32 << 20
# Footers read to learn what share of the bytes the condition's columns are.
SAMPLED_FOOTERS = 4
# Matches after which the probe stops: enough to tell a spread condition's rate.
PROBE_MATCHES = 64
# Up to this many candidate rows a row-level write reads its target in one task (no shuffle to
# spread the read, one job per write), and MERGE reads the matched rows in its one pass.
SMALL_INPUT_ROWS = 1_000_000


class How(StrEnum):
    """How a row-level write reads its target (the value is what EXPLAIN says)."""

    ONE_PASS = "one pass"
    TWO_PHASES = "two phases"
    # a DELETE that keeps no before-images: phase 1's positions are everything
    POSITIONS = "positions only"


ONE_PASS, TWO_PHASES, POSITIONS = How.ONE_PASS, How.TWO_PHASES, How.POSITIONS


@dataclass(frozen=True)
class Strategy:
    """How a row-level write reads its target, and why."""

    how: How
    reason: str

    @property
    def one_pass(self) -> bool:
        return self.how == ONE_PASS

    def describe(self, operation: str, table: str) -> str:
        """One line for EXPLAIN."""
        return f"{operation} {table}: {self.how} ({self.reason})"


def referenced(
    expressions: Sequence[exp.Expression | None], names: set[str], schema: TableSchema
) -> set[str]:
    """Physical names of the target's columns that ``expressions`` use; ``names`` are the
    lower-case names the target goes by (table name, alias)."""
    columns = {c.name.lower(): c.physical for c in schema.columns}
    used = set()
    for expression in expressions:
        if expression is None:
            continue
        for column in expression.find_all(exp.Column):
            qualifier = column.table.lower()
            if (not qualifier or qualifier in names) and column.name.lower() in columns:
                used.add(columns[column.name.lower()])
    return used


def choose(
    env: Env,
    files: Sequence[LiveFile],
    *,
    condition: exp.Expression | None,
    phase_one_columns: set[str],
    joined: bool,
    needs_rows: bool,
    probe: Callable[[LiveFile], tuple[int, int]],
    reads_late: Callable[[], bool] = lambda: False,
) -> Strategy:
    """The strategy of a row-level write over candidate ``files``.

        ``phase_one_columns`` are the physical columns phase 1 would read; ``joined``: the statement
        joins a source; ``needs_rows``: it needs the matched rows' old values (an UPDATE, or a
        DELETE that keeps before-images); ``probe(file)`` returns (matches, rows examined) of the
    condition in one file; ``reads_late()``: whether changelake's reader evaluates a one pass's
    condition before decoding its other columns (``Scan.late``).
        ``spark.changelake.rowLevelPlan`` = ``one-pass`` or ``two-phase`` overrides the choice for
    a statement without a source join.
    """
    mode = _mode(env)
    if not needs_rows:
        return Strategy(POSITIONS, "the table keeps no before-images")
    if joined:  # also when forced: the join's shuffle would carry full rows
        return Strategy(TWO_PHASES, "it joins a source: the join finds the matches first")
    if mode != "auto":
        return _forced(mode)
    if condition is None:
        return Strategy(ONE_PASS, "every row matches")
    if condition.find(exp.Select) is not None:
        return Strategy(TWO_PHASES, "the condition has a subquery")
    if not files:
        return Strategy(ONE_PASS, "statistics rule out every file: nothing is read")
    total = sum(f.file.size_bytes for f in files)
    if total <= SMALL_BYTES:
        return Strategy(ONE_PASS, f"{len(files)} candidate files, {_size(total)}: one read")
    if _row_predicate(condition) and reads_late():
        return Strategy(
            ONE_PASS,
            "changelake's reader evaluates the condition first and decodes the other columns of"
            " the matched rows only",
        )
    share = _share(env.warehouse, files, phase_one_columns)
    largest = max(files, key=lambda f: f.live_rows)
    matched, examined = probe(largest)
    rate = matched / examined if examined else 0.0
    holding = [1 - (1 - rate) ** f.live_rows for f in files]
    # Phase 2 reads the files holding a match whole in this count, though it reads late (only the
    # pages that hold a match): a second read's fixed costs outweighed the pages it skips when
    # measured (bench/ANALYSIS.md, a point DELETE of 100 rows in 10M).
    in_vain = sum((1 - p) * f.file.size_bytes for p, f in zip(holding, files, strict=True))
    how = ONE_PASS if in_vain <= share * total else TWO_PHASES
    return Strategy(
        how,
        f"a probe found {matched} matches in {examined} rows of the largest candidate file,"
        f" so about {sum(holding):.0f} of {len(files)} files hold a match; phase 1 would read"
        f" {share:.0%} of their {_size(total)}, one pass would decode {in_vain / total:.0%} in"
        " vain",
    )


# Functions whose value is not the row's alone (sqlglot's names; a function it does not know,
# a UDF among them, is an Anonymous one: not known to be a row predicate either)
_NOT_OF_THE_ROW = (exp.Rand, exp.Randn, exp.Uuid, exp.Shuffle, exp.Anonymous)


def _row_predicate(condition: exp.Expression) -> bool:
    """Whether ``condition`` is a deterministic predicate of the row alone, which changelake's
    reader evaluates itself (``ReaderCondition.java``: it checks again)."""
    return condition.find(*_NOT_OF_THE_ROW) is None


def choose_merge(env: Env, files: Sequence[LiveFile]) -> Strategy:
    """The strategy of a MERGE into a target of ``files``: one pass, its join carrying the matched
    rows' old values and identity, into a target of at most ``SMALL_INPUT_ROWS`` rows; else two
    phases, the join carrying positions only. ``spark.changelake.rowLevelPlan`` = ``one-pass`` or
    ``two-phase`` overrides the choice."""
    mode = _mode(env)
    if mode != "auto":
        return _forced(mode)
    rows = sum(f.live_rows for f in files)
    if rows <= SMALL_INPUT_ROWS:
        return Strategy(
            ONE_PASS,
            f"{rows} target rows, at most {SMALL_INPUT_ROWS}: the join also reads the matched rows",
        )
    return Strategy(
        TWO_PHASES, f"{rows} target rows, over {SMALL_INPUT_ROWS}: the join finds the matches first"
    )


def _mode(env: Env) -> str:
    """The ``spark.changelake.rowLevelPlan`` setting, checked."""
    mode = env.settings.row_level_plan
    if mode not in MODES:
        raise InvalidStatementError(
            f"{ROW_LEVEL_PLAN} is {mode!r}; set it to one of {', '.join(MODES)} (auto chooses by cost)."
        )
    return mode


def _forced(mode: str) -> Strategy:
    return Strategy(ONE_PASS if mode == "one-pass" else TWO_PHASES, f"{ROW_LEVEL_PLAN} = {mode}")


def _share(warehouse: Warehouse, files: Sequence[LiveFile], columns: set[str]) -> float:
    """The share of the files' bytes in ``columns``, from the largest files' footers."""
    sampled = sorted(files, key=lambda f: f.file.size_bytes, reverse=True)[:SAMPLED_FOOTERS]
    used = whole = 0
    for f in sampled:
        sizes = column_bytes(warehouse, f.file.path)
        # a nested column's leaves are "c3.x", "c3.list.element": they belong to c3
        used += sum(n for name, n in sizes.items() if name.split(".")[0] in columns)
        whole += sum(sizes.values())
    return used / whole if whole else 1.0


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
