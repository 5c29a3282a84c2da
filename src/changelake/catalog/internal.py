"""Tables changelake keeps for itself: the reserved namespace of internal tables.

An internal table belongs to an owner table and serves one purpose (the APPLY CHANGES state of
its owner; dynamic tables and external tables will add theirs). Its name is
``#<owner id>#<purpose>``, e.g. ``#12#apply_state``:

- ``#`` cannot start an unquoted identifier, and no user statement may create a table, view or
  stream whose name starts with it (``check_user_name``), so a user's ``t__apply_state`` is just
  a table of that name;
- the owner's *id*, not its name: renaming the owner keeps the link and renames nothing;
- dropping or replacing the owner drops its internal tables in the same commit
  (``table_repo.drop``, by ``owned_prefix``).

Queries may read an internal table; only changelake writes it, in the same commit as its owner.
User statements that would write, alter or drop it, or make a view or stream depend on it, fail
with ``check_user_may_change``. SHOW TABLES leaves internal tables out; SHOW INTERNAL TABLES
lists them with their owner and purpose. Their properties repeat owner and purpose for readers
of the catalog database; the name is what changelake goes by.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from changelake.catalog.model import TableInfo
from changelake.errors import DynamicTableError, ExternalTableError, InternalTableError

PREFIX = "#"
OWNER_PROPERTY = "internal_owner_id"
PURPOSE_PROPERTY = "internal_purpose"


@dataclass(frozen=True)
class Purpose:
    """What an internal table is for. ``start_over``: the statement that makes changelake
    forget it, if a user may want that (``{owner}``: the owner's name)."""

    key: str  # in the name
    label: str
    start_over: str = ""


APPLY_STATE = Purpose(
    "apply_state",
    "APPLY CHANGES state",
    "CREATE OR REPLACE TABLE {owner} AS SELECT * FROM {owner} (a new table: the old one's"
    " history, state and tombstones are forgotten)",
)
_PURPOSES = {p.key: p for p in (APPLY_STATE,)}


@dataclass(frozen=True)
class InternalTable:
    """The owner and purpose an internal table's name says."""

    owner_id: int
    purpose: Purpose

    @property
    def name(self) -> str:
        return f"{owned_prefix(self.owner_id)}{self.purpose.key}"

    @property
    def properties(self) -> tuple[tuple[str, str], ...]:
        return ((OWNER_PROPERTY, str(self.owner_id)), (PURPOSE_PROPERTY, self.purpose.key))

    @staticmethod
    def of(name: str) -> InternalTable | None:
        """``name`` read as an internal table's name; None for a user table's (including one
        named ``#...`` by a user before the prefix was reserved)."""
        owner, separator, key = name[len(PREFIX) :].partition(PREFIX)
        if not (is_reserved(name) and owner.isdigit() and separator and key):
            return None
        # a purpose of a newer changelake is still internal, just not described
        return InternalTable(int(owner), _PURPOSES.get(key) or Purpose(key, key))


def owned_prefix(owner_id: int) -> str:
    """How the names of ``owner_id``'s internal tables start."""
    return f"{PREFIX}{owner_id}{PREFIX}"


def is_reserved(name: str) -> bool:
    return name.startswith(PREFIX)


def check_user_name(name: str, *, kind: str) -> None:
    """Refuse ``name`` for a table, view or stream a user creates (or renames a table to)."""
    if is_reserved(name):
        raise InternalTableError(
            f"Cannot name a {kind} {name}: names starting with {PREFIX} are reserved for the"
            " tables changelake keeps for itself (SHOW INTERNAL TABLES lists them). Choose"
            " another name."
        )


class Tables(Protocol):
    """What ``check_user_may_change`` reads: a table by id (the owner, for the message)."""

    def table_by_id(self, table_id: int) -> TableInfo: ...


def check_user_may_change(tables: Tables, info: TableInfo, *, action: str) -> None:
    """Refuse a user statement that would ``action`` (``"change"``, ``"drop"``, ``"create view
    v on"``) the table ``info`` if it is internal, or change or drop it if it is a dynamic or
    an external table (views and streams on them are fine)."""
    if info.is_dynamic() and not action.startswith("create "):
        drop = f" DROP DYNAMIC TABLE {info.name} drops it." if action == "drop" else ""
        raise DynamicTableError(
            f"Cannot {action} table {info.name}: it is a dynamic table, whose rows are its"
            " query's result as of its last refresh. Change the tables it reads and refresh it"
            f" (ALTER DYNAMIC TABLE {info.name} REFRESH), or redefine it with CREATE OR REPLACE"
            f" DYNAMIC TABLE.{drop}"
        )
    if info.is_external() and not action.startswith("create "):
        drop = f" DROP EXTERNAL TABLE {info.name} drops it." if action == "drop" else ""
        raise ExternalTableError(
            f"Cannot {action} table {info.name}: it is an external table, whose rows follow its"
            " source. Change the source; ALTER EXTERNAL TABLE"
            f" {info.name} REFRESH brings its changes in now.{drop}"
        )
    internal = InternalTable.of(info.name)
    if internal is None:
        return
    owner = tables.table_by_id(internal.owner_id).name
    purpose = internal.purpose
    start_over = purpose.start_over.format(owner=owner)
    if start_over:
        start_over = f" To start its {purpose.label} over: {start_over}."
    raise InternalTableError(
        f"Cannot {action} table {info.name}: it is internal. changelake keeps the"
        f" {purpose.label} of table {owner} in it and changes it only in {owner}'s commits;"
        " queries may read it, but no statement may write, alter or drop it, nor create a view"
        f" or stream on it (that would corrupt what {owner} relies on). DROP TABLE {owner} drops"
        f" it too.{start_over}"
    )
