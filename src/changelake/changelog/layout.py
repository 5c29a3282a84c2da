"""The layout of an export target directory, and the file operations that keep it readable.

::

    <target>/
      s-12-15/                    one consumption of stream s: frontier 12 (exclusive) to 15
        part-00000-….parquet      (or .json: JSON lines)
        _SUCCESS                  the manifest, written last: files, row counts, what was consumed
      s-init-15/                  the first read of a SHOW_INITIAL_ROWS stream (its rows at 15)
      v-3_7-4_9/                  a stream on a view: one frontier per base table, by table id
      s-15-18__t2-4-6/            a query reading two streams; long or unsafe names are a hash
      export-<statement id>/      an export whose query reads no stream
      _tmp-<name>-<id>/           being written (or left by a crash): never read, removed by the
                                  next export into <target>

A directory is complete once it has its ``_SUCCESS`` manifest: it is written into a ``_tmp-``
sibling and renamed into place only after every file and the manifest are written. **Readers read
only directories with a ``_SUCCESS`` manifest, and in them the files it lists.** Names starting
with ``_`` are skipped by Spark, Hadoop and PyArrow dataset readers anyway.

A stream consumption's name is a function of the interval it read, so a re-run after a crash
before the catalog commit (the frontier did not move) reads the same interval and replaces the
directory. If the table moved on in between, the re-run reads a longer interval from the same
frontier: a complete directory of the same streams starting at the same frontiers is an
uncommitted consumption and is removed before the new one is renamed into place. A consumption
that committed moved the frontier, so nothing starts there again. Hence: one exporter writes
into a target directory at a time, and a stream exported there has no other consumer (a directory
left by a crash is recognised only while the stream's frontier is still where it started).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

import pyarrow.fs as pafs
import pyarrow.parquet as pq

MANIFEST = "_SUCCESS"
TEMPORARY = "_tmp-"
_SAFE = re.compile(r"[a-z0-9_]{1,60}")
_MAX_NAME = 100

Frontiers = tuple[tuple[int, int], ...]  # (table id, version), by table id


@dataclass(frozen=True)
class Consumption:
    """What an export consumed of one stream: from its frontiers ``start_exclusive`` (plus, on
    the first read of a SHOW_INITIAL_ROWS stream, the rows at the end) to ``end_inclusive``."""

    stream: str
    stream_id: int
    start_exclusive: Frontiers
    end_inclusive: Frontiers
    initial_rows: bool = False

    @property
    def moves(self) -> bool:
        """Whether committing it moves the stream (an empty consumption does not)."""
        return self.initial_rows or self.start_exclusive != self.end_inclusive

    @property
    def label(self) -> str:
        start = "init" if self.initial_rows else _versions(self.start_exclusive)
        return f"{self.stream.lower()}-{start}-{_versions(self.end_inclusive)}"

    def starts_like(self, other: Consumption) -> bool:
        return (self.stream_id, self.start_exclusive, self.initial_rows) == (
            other.stream_id,
            other.start_exclusive,
            other.initial_rows,
        )

    def to_json(self) -> dict:
        return {
            "stream": self.stream,
            "stream_id": self.stream_id,
            "start_exclusive": [list(f) for f in self.start_exclusive],
            "end_inclusive": [list(f) for f in self.end_inclusive],
            "initial_rows": self.initial_rows,
        }

    @staticmethod
    def from_json(data: dict) -> Consumption:
        return Consumption(
            data["stream"],
            int(data["stream_id"]),
            tuple((int(t), int(v)) for t, v in data["start_exclusive"]),
            tuple((int(t), int(v)) for t, v in data["end_inclusive"]),
            bool(data["initial_rows"]),
        )


def _versions(frontiers: Frontiers) -> str:
    return "_".join(str(v) for _, v in frontiers)


@dataclass(frozen=True)
class ExportedFile:
    name: str
    rows: int
    bytes: int


@dataclass(frozen=True)
class Manifest:
    """The ``_SUCCESS`` file of a complete export directory."""

    statement_id: str
    file_format: str
    files: tuple[ExportedFile, ...]
    consumed: tuple[Consumption, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def to_json(self) -> str:
        return json.dumps(
            {
                "statement_id": self.statement_id,
                "format": self.file_format,
                "rows": self.rows,
                "files": [{"name": f.name, "rows": f.rows, "bytes": f.bytes} for f in self.files],
                "consumed": [c.to_json() for c in self.consumed],
            },
            indent=1,
        )

    @staticmethod
    def from_json(text: str) -> Manifest:
        data = json.loads(text)
        return Manifest(
            data["statement_id"],
            data["format"],
            tuple(ExportedFile(f["name"], f["rows"], f["bytes"]) for f in data["files"]),
            tuple(Consumption.from_json(c) for c in data["consumed"]),
        )


def directory_name(consumed: tuple[Consumption, ...], *, statement_id: str) -> str:
    """The directory an export writes: named by what it consumes, else by its statement."""
    if not consumed:
        return f"export-{statement_id}"
    name = "__".join(c.label for c in consumed)
    if len(name) <= _MAX_NAME and all(_SAFE.fullmatch(c.stream.lower()) for c in consumed):
        return name
    first = re.sub(r"[^a-z0-9_]", "_", consumed[0].stream.lower())[:40]
    return f"{first}-{hashlib.sha256(name.encode()).hexdigest()[:20]}"


_SUFFIXES = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json"}


def stored_as(location: str) -> str | None:
    """What the changelog at ``location`` (a file or a directory) is stored as, "parquet" or
    "json": what the manifest of an export directory says, else what the files' names say;
    None when neither says."""
    uri = location.strip().rstrip("/")
    try:
        fs, base = pafs.FileSystem.from_uri(uri if "://" in uri else os.path.abspath(uri))
        info = fs.get_file_info(base)
        if info.type == pafs.FileType.Directory:
            try:
                with fs.open_input_stream(f"{base}/{MANIFEST}") as f:
                    return Manifest.from_json(f.read().decode()).file_format
            except (FileNotFoundError, json.JSONDecodeError, KeyError):
                pass
            names = [i.base_name for i in fs.get_file_info(pafs.FileSelector(base))]
        else:
            names = [info.base_name]
    except (OSError, ValueError):
        return None
    found = {_SUFFIXES.get(os.path.splitext(n.removesuffix(".gz"))[1]) for n in names}
    found.discard(None)
    return found.pop() if len(found) == 1 else None


@dataclass(frozen=True)
class ExportDirectory:
    """The target directory of an export, as Spark (``uri``) and PyArrow (``fs``, ``base``)
    reach it."""

    uri: str
    fs: pafs.FileSystem
    base: str

    @staticmethod
    def at(location: str) -> ExportDirectory:
        """The directory at ``location`` (a local path or a URI), created if missing."""
        uri = location.rstrip("/")
        if "://" not in uri:
            uri = os.path.abspath(uri)
        fs, base = pafs.FileSystem.from_uri(uri)
        fs.create_dir(base, recursive=True)
        return ExportDirectory(uri, fs, base.rstrip("/"))

    def uri_of(self, name: str) -> str:
        return f"{self.uri}/{name}"

    def _path(self, name: str) -> str:
        return f"{self.base}/{name}"

    def entries(self) -> list[str]:
        """Names of the directories directly inside."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.base, allow_not_found=True))
        return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)

    def manifest(self, name: str) -> Manifest | None:
        """The manifest of directory ``name``; None while it is incomplete or absent."""
        try:
            with self.fs.open_input_stream(self._path(f"{name}/{MANIFEST}")) as f:
                return Manifest.from_json(f.read().decode())
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None

    def complete(self) -> dict[str, Manifest]:
        """The complete export directories inside, by name: what readers read."""
        found = {}
        for name in self.entries():
            if not name.startswith(TEMPORARY) and (manifest := self.manifest(name)) is not None:
                found[name] = manifest
        return found

    def data_files(self, name: str) -> list[tuple[str, int]]:
        """(file name, size) of the data files in directory ``name``."""
        infos = self.fs.get_file_info(pafs.FileSelector(self._path(name)))
        return sorted(
            (i.base_name, i.size or 0)
            for i in infos
            if i.type == pafs.FileType.File and not i.base_name.startswith(("_", "."))
        )

    def parquet_rows(self, name: str) -> int:
        """The row count in the footer of Parquet file ``name``."""
        with self.fs.open_input_file(self._path(name)) as f:
            return pq.ParquetFile(f).metadata.num_rows

    def write_manifest(self, name: str, manifest: Manifest) -> None:
        with self.fs.open_output_stream(self._path(f"{name}/{MANIFEST}")) as f:
            f.write(manifest.to_json().encode())

    def remove(self, name: str) -> None:
        try:
            self.fs.delete_dir(self._path(name))
        except FileNotFoundError:
            pass

    def remove_temporaries(self) -> list[str]:
        """Remove what crashed exports left half written."""
        doomed = [n for n in self.entries() if n.startswith(TEMPORARY)]
        for name in doomed:
            self.remove(name)
        return doomed

    def remove_uncommitted(self, consumed: tuple[Consumption, ...]) -> list[str]:
        """Remove complete directories of an earlier consumption of the same streams from the
        same frontiers: it never committed (a committed one moved the frontiers)."""
        if not any(c.moves for c in consumed):
            return []
        doomed = [
            name
            for name, manifest in self.complete().items()
            if len(manifest.consumed) == len(consumed)
            and any(c.moves for c in manifest.consumed)
            and all(a.starts_like(b) for a, b in zip(manifest.consumed, consumed, strict=True))
        ]
        for name in doomed:
            self.remove(name)
        return doomed

    def publish(self, temporary: str, name: str) -> None:
        """Rename the complete ``temporary`` to ``name``, replacing what is there."""
        self.remove(name)
        self.fs.move(self._path(temporary), self._path(name))
