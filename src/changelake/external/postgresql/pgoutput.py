"""A decoder of PostgreSQL's logical replication protocol ``pgoutput``, protocol version 1.

The rows it reads are those of ``pg_logical_slot_peek_binary_changes(slot, NULL, NULL,
'proto_version', '1', 'publication_names', pub)``: one message per row, as
``(lsn text, xid, data bytes)``. A transaction is Begin, then Relation, Type and Origin messages
mixed with its changes, then Commit; ``Decoder.feed`` yields it whole at its Commit.

Things the protocol leaves to the reader:

* A change names its table by OID only. The table's Relation message comes before its first
  change in each decoding session (every call of the SQL function is one) and again after the
  table's schema changes, so the decoder keeps the latest one per OID; a change carries the
  Relation it was decoded with.
* Values are PostgreSQL's text output (``pgtypes.converter`` turns them into Python values).
  A TOASTed value an UPDATE did not change is not sent: it is ``UNCHANGED``, in the new tuple
  even when the update changed the key.
* An UPDATE or DELETE carries the old row only as far as the table's replica identity says: its
  key columns (``old_is_key``, the others None) when the key changed or the row was deleted,
  the whole row under REPLICA IDENTITY FULL (where every column is flagged as key), nothing for
  an UPDATE that kept the key.
* From PostgreSQL 15 on, transactions with no published change are not sent at all.

Reference: https://www.postgresql.org/docs/15/protocol-logicalrep-message-formats.html
"""

from __future__ import annotations

import datetime as dt
import enum
import struct
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from changelake.errors import SourceError

__all__ = [
    "UNCHANGED",
    "Change",
    "Decoder",
    "Relation",
    "RelationColumn",
    "Transaction",
    "Truncate",
    "Unchanged",
    "Value",
    "format_lsn",
    "parse_lsn",
]

_POSTGRES_EPOCH = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
_KEY_FLAG = 1
_TRUNCATE_CASCADE = 1
_TRUNCATE_RESTART_IDENTITY = 2
_REPLICA_IDENTITIES = frozenset("dnfi")  # default, nothing, full, index
_UINT8, _INT16, _INT32 = struct.Struct("!B"), struct.Struct("!h"), struct.Struct("!i")
_UINT32, _INT64, _UINT64 = struct.Struct("!I"), struct.Struct("!q"), struct.Struct("!Q")


def parse_lsn(text: str) -> int:
    """The LSN PostgreSQL prints as ``text`` as an integer.

    >>> parse_lsn("0/1925168"), parse_lsn("1/0")
    (26366312, 4294967296)
    """
    high, slash, low = text.partition("/")
    try:
        parts = (int(high, 16), int(low, 16)) if slash and "/" not in low else None
    except ValueError:
        parts = None
    if parts is None or not all(0 <= part <= 0xFFFFFFFF for part in parts):
        raise SourceError(
            f"Expected a PostgreSQL LSN such as '0/1925168' (two hexadecimal numbers of at most "
            f"8 digits), found {text!r}."
        )
    return parts[0] << 32 | parts[1]


def format_lsn(value: int) -> str:
    """``value`` as PostgreSQL prints an LSN.

    >>> format_lsn(26366312)
    '0/1925168'
    """
    if not 0 <= value < 1 << 64:
        raise SourceError(f"An LSN is a 64-bit unsigned integer, found {value}.")
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


class Unchanged(enum.Enum):
    """The type of ``UNCHANGED``."""

    UNCHANGED = "UNCHANGED"

    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = Unchanged.UNCHANGED
"""A TOASTed value the change left as it was, so the message does not carry it."""

Value = str | Unchanged | None
"""One column of a tuple: text output, ``UNCHANGED``, or None for SQL NULL."""


@dataclass(frozen=True)
class RelationColumn:
    """A published column: ``type_modifier`` is ``atttypmod`` (-1 when the type has none) and
    ``is_key`` says it is part of the replica identity."""

    name: str
    type_oid: int
    type_modifier: int
    is_key: bool


@dataclass(frozen=True)
class Relation:
    """A published table as its latest Relation message described it. ``replica_identity`` is
    ``pg_class.relreplident``: 'd' (primary key), 'n' (nothing), 'f' (full row), 'i' (index)."""

    oid: int
    schema: str
    name: str
    replica_identity: str
    columns: tuple[RelationColumn, ...]

    def __post_init__(self) -> None:
        if self.replica_identity not in _REPLICA_IDENTITIES:
            raise ValueError(f"unknown replica identity {self.replica_identity!r}")


@dataclass(frozen=True)
class Change:
    """One row inserted, updated or deleted. ``new`` is the row after an INSERT or UPDATE;
    ``old`` the row before an UPDATE or DELETE as far as the replica identity sends it (see the
    module docstring), with ``old_is_key`` when it holds only the key columns."""

    kind: str  # 'INSERT' | 'UPDATE' | 'DELETE'
    relation: Relation
    new: tuple[Value, ...] | None
    old: tuple[Value, ...] | None
    old_is_key: bool

    def __post_init__(self) -> None:
        if self.kind not in ("INSERT", "UPDATE", "DELETE"):
            raise ValueError(f"unknown change kind {self.kind!r}")
        if (self.new is None) != (self.kind == "DELETE"):
            raise ValueError(f"a {self.kind} with new={self.new!r}")
        if self.kind != "UPDATE" and (self.old is None) != (self.kind == "INSERT"):
            raise ValueError(f"a {self.kind} with old={self.old!r}")
        if self.old_is_key and self.old is None:
            raise ValueError("old_is_key without an old tuple")


@dataclass(frozen=True)
class Truncate:
    """A TRUNCATE of one or more published tables."""

    relations: tuple[Relation, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True)
class Transaction:
    """A committed transaction's published changes, in order. ``final_lsn`` is the LSN of its
    commit record and ``end_lsn`` the end of that record: a slot advanced to ``end_lsn`` does
    not send the transaction again."""

    xid: int
    final_lsn: int
    end_lsn: int
    commit_time: dt.datetime
    changes: tuple[Change | Truncate, ...]


@dataclass
class _Open:
    """A transaction between its Begin and its Commit."""

    xid: int
    final_lsn: int
    commit_time: dt.datetime
    changes: list[Change | Truncate] = field(default_factory=list)


class Decoder:
    """Decodes a stream of pgoutput messages into transactions.

    It keeps the Relation of every table seen and the transaction under way between calls of
    ``feed``, so one decoder may read a session's rows in several pieces. Start a new decoder
    (or keep this one: a new session sends every Relation again) for each call of the SQL
    function, whose rows always hold whole transactions.
    """

    def __init__(self) -> None:
        self._relations: dict[int, Relation] = {}
        self._open: _Open | None = None

    @property
    def relations(self) -> Mapping[int, Relation]:
        """The latest Relation of each table seen, by OID."""
        return MappingProxyType(self._relations)

    def feed(self, rows: Iterable[tuple[str, int | str, bytes]]) -> Iterator[Transaction]:
        """Decode ``rows`` (lsn, xid, data), yielding each transaction at its Commit. Only ``lsn``
        (for error messages) and ``data`` are read: psycopg returns the xid as text."""
        for lsn, _xid, data in rows:
            message = _Message(bytes(data), lsn=lsn)
            committed = self._read(message)
            message.finish()
            if committed is not None:
                yield committed

    def _read(self, message: _Message) -> Transaction | None:
        match message.kind:
            case "B":
                self._begin(message)
            case "C":
                return self._commit(message)
            case "R":
                relation = _relation(message)
                self._relations[relation.oid] = relation
            case "I" | "U" | "D":
                self._in_transaction(message).changes.append(self._change(message))
            case "T":
                self._in_transaction(message).changes.append(self._truncate(message))
            case "Y":
                message.uint32(), message.string(), message.string()  # oid, schema, name
            case "O":
                message.uint64(), message.string()  # origin's commit LSN, origin name
            case "M":
                message.uint8(), message.uint64(), message.string()  # flags, LSN, prefix
                message.take(message.int32())
            case _:
                raise message.error(
                    "a message type changelake does not decode (it asks for protocol version "
                    "1 without streaming, two-phase commit or binary values)"
                )
        return None

    def _begin(self, message: _Message) -> None:
        if self._open is not None:
            raise message.error(f"a Begin while transaction {self._open.xid} is still open")
        final_lsn, commit_time = message.uint64(), _timestamp(message.int64())
        self._open = _Open(xid=message.uint32(), final_lsn=final_lsn, commit_time=commit_time)

    def _commit(self, message: _Message) -> Transaction:
        open_ = self._in_transaction(message)
        message.uint8()  # flags, unused
        commit_lsn, end_lsn = message.uint64(), message.uint64()
        message.int64()  # commit time, as in Begin
        if commit_lsn != open_.final_lsn:
            raise message.error(
                f"a Commit at {format_lsn(commit_lsn)} for transaction {open_.xid}, whose Begin "
                f"said it commits at {format_lsn(open_.final_lsn)}"
            )
        self._open = None
        return Transaction(
            xid=open_.xid,
            final_lsn=open_.final_lsn,
            end_lsn=end_lsn,
            commit_time=open_.commit_time,
            changes=tuple(open_.changes),
        )

    def _in_transaction(self, message: _Message) -> _Open:
        if self._open is None:
            raise message.error("a message that belongs in a transaction, outside of one")
        return self._open

    def _relation_of(self, message: _Message) -> Relation:
        oid = message.uint32()
        relation = self._relations.get(oid)
        if relation is None:
            raise message.error(f"a change of relation {oid}, which no Relation message described")
        return relation

    def _change(self, message: _Message) -> Change:
        relation = self._relation_of(message)
        marker = message.byte()
        old: tuple[Value, ...] | None = None
        old_is_key = False
        if message.kind != "I" and marker in ("K", "O"):
            old, old_is_key = _tuple(message, relation), marker == "K"
            if message.kind == "D":
                return Change("DELETE", relation, new=None, old=old, old_is_key=old_is_key)
            marker = message.byte()
        if message.kind == "D":
            raise message.error(f"a Delete with tuple marker {marker!r} (expected K or O)")
        if marker != "N":
            raise message.error(f"tuple marker {marker!r} where the new tuple (N) belongs")
        kind = "INSERT" if message.kind == "I" else "UPDATE"
        return Change(kind, relation, new=_tuple(message, relation), old=old, old_is_key=old_is_key)

    def _truncate(self, message: _Message) -> Truncate:
        count, options = message.int32(), message.uint8()
        relations = tuple(self._relation_of(message) for _ in range(count))
        return Truncate(
            relations=relations,
            cascade=bool(options & _TRUNCATE_CASCADE),
            restart_identity=bool(options & _TRUNCATE_RESTART_IDENTITY),
        )


def _relation(message: _Message) -> Relation:
    oid, schema, name = message.uint32(), message.string(), message.string()
    replica_identity = message.byte()
    if replica_identity not in _REPLICA_IDENTITIES:
        raise message.error(f"replica identity {replica_identity!r} (expected one of d, n, f, i)")
    columns = []
    for _ in range(message.int16()):
        flags, column = message.uint8(), message.string()
        type_oid, type_modifier = message.uint32(), message.int32()
        columns.append(RelationColumn(column, type_oid, type_modifier, bool(flags & _KEY_FLAG)))
    return Relation(oid, schema, name, replica_identity, tuple(columns))


def _tuple(message: _Message, relation: Relation) -> tuple[Value, ...]:
    count = message.int16()
    if count != len(relation.columns):
        raise message.error(
            f"a tuple of {count} columns for {relation.schema}.{relation.name}, whose Relation "
            f"message has {len(relation.columns)}"
        )
    values: list[Value] = []
    for column in relation.columns:
        match message.byte():
            case "n":
                values.append(None)
            case "u":
                values.append(UNCHANGED)
            case "t":
                raw = message.take(message.int32())
                try:
                    values.append(raw.decode("utf-8"))
                except UnicodeDecodeError as e:
                    raise message.error(f"column {column.name} is not valid UTF-8 ({e})") from e
            case "b":
                raise message.error(
                    f"column {column.name} in binary format (changelake reads text: leave "
                    "pgoutput's 'binary' option off)"
                )
            case other:
                raise message.error(f"column {column.name} with value kind {other!r}")
    return tuple(values)


def _timestamp(microseconds: int) -> dt.datetime:
    return _POSTGRES_EPOCH + dt.timedelta(microseconds=microseconds)


class _Message:
    """One message's bytes with a read position; every read checks the bytes are there."""

    def __init__(self, data: bytes, *, lsn: str):
        self._data = data
        self._lsn = lsn
        self._position = 0
        self.kind = self.byte() if data else ""

    def error(self, found: str) -> SourceError:
        kind = f"message {self.kind!r}" if self.kind else "an empty message"
        return SourceError(
            f"Cannot decode pgoutput {kind} at LSN {self._lsn}: found {found}. "
            f"Message bytes: {self._data[:64].hex()}{'...' if len(self._data) > 64 else ''}."
        )

    def take(self, count: int) -> bytes:
        end = self._position + count
        if count < 0 or end > len(self._data):
            raise self.error(
                f"the message ends after {len(self._data)} bytes, where {count} more bytes "
                f"were due at offset {self._position}"
            )
        chunk = self._data[self._position : end]
        self._position = end
        return chunk

    def byte(self) -> str:
        return chr(self.take(1)[0])

    def uint8(self) -> int:
        return self._read(_UINT8)

    def int16(self) -> int:
        return self._read(_INT16)

    def int32(self) -> int:
        return self._read(_INT32)

    def uint32(self) -> int:
        """An OID or a transaction id."""
        return self._read(_UINT32)

    def int64(self) -> int:
        return self._read(_INT64)

    def uint64(self) -> int:
        """An LSN."""
        return self._read(_UINT64)

    def string(self) -> str:
        end = self._data.find(b"\0", self._position)
        if end < 0:
            raise self.error(f"a string without its terminating NUL at offset {self._position}")
        raw = self.take(end - self._position)
        self._position += 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.error(f"a name that is not valid UTF-8 ({e})") from e

    def finish(self) -> None:
        if self._position != len(self._data):
            raise self.error(f"{len(self._data) - self._position} bytes after its last field")

    def _read(self, field: struct.Struct) -> int:
        return field.unpack(self.take(field.size))[0]
