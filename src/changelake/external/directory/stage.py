"""A directory of files as a FILES external table reads it (Snowflake's stage as the model):
where it is, which files it holds, and how Spark reads them.

Listing is metadata and runs on the driver (PyArrow's file systems: local directories, file://
and the URIs PyArrow opens); the files' rows are read by Spark only. A file is found recursively
under the location; names starting with '.' or '_' (``_SUCCESS``, ``.crc`` files, in any folder
of the path) are skipped, as Spark skips them; PATTERN must match the whole path relative to the
location, as in Snowflake.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.readwriter import DataFrameReader

from changelake.catalog.model import ExternalFile
from changelake.errors import InvalidStatementError, SourceChangedError, SourceError

# FILE_FORMAT options (besides TYPE) by TYPE, and the Spark reader option each one sets
_OPTIONS: dict[str, dict[str, str]] = {
    "PARQUET": {},
    "CSV": {
        "SKIP_HEADER": "header",
        "PARSE_HEADER": "header",
        "FIELD_DELIMITER": "sep",
        "FIELD_OPTIONALLY_ENCLOSED_BY": "quote",
        "ESCAPE": "escape",
        "NULL_IF": "nullValue",
    },
    "JSON": {},
}
_NONE_MEANS_EMPTY = ("FIELD_OPTIONALLY_ENCLOSED_BY", "ESCAPE")  # NONE: no quoting, no escape
_TRUE, _FALSE = ("TRUE", "1"), ("FALSE", "0")
_GLOB = re.compile(r"([\\*?\[\]{}])")
_DETAIL = re.compile(r"Encountered error while reading file \S+?\. (.*)$", re.MULTILINE)
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+")
_CAUSE = re.compile(r"^Caused by: [\w.$]+: (.+)$", re.MULTILINE)
_READ_ERRORS = ("FAILED_READ_FILE", "CANNOT_READ_FILE_FOOTER", "PATH_NOT_FOUND")


@dataclass(frozen=True)
class FileFormat:
    """FILE_FORMAT = (TYPE = …, …) as Spark reader options."""

    type: str  # PARQUET | CSV | JSON
    options: tuple[tuple[str, str], ...]  # Spark reader options
    header_names: bool  # CSV: the header line names the columns (PARSE_HEADER = TRUE)

    @staticmethod
    def of(given: dict[str, str], *, about: str) -> FileFormat:
        """The format of FILE_FORMAT's options (upper-case keys, TYPE among them); an error
        naming the supported options for any other."""
        kind = given["TYPE"].upper()
        supported = _OPTIONS[kind]
        unknown = sorted(k for k in given if k != "TYPE" and k not in supported)
        if unknown:
            raise InvalidStatementError(
                f"{about}: FILE_FORMAT option(s) {', '.join(unknown)} are not supported for TYPE ="
                f" {kind}; the supported options are: {', '.join(supported) or 'none'}."
            )
        options: dict[str, str] = {}
        if kind in ("CSV", "JSON"):
            options["mode"] = "FAILFAST"  # a malformed record fails the read, naming the file
        header_names = _flag(given.get("PARSE_HEADER", "FALSE"), "PARSE_HEADER", about=about)
        skip = given.get("SKIP_HEADER", "0").strip()
        if skip not in ("0", "1"):
            raise InvalidStatementError(
                f"{about}: SKIP_HEADER = {skip} is not supported; Spark skips at most one header"
                " line (SKIP_HEADER = 1)."
            )
        if header_names and skip == "1":
            raise InvalidStatementError(
                f"{about}: PARSE_HEADER = TRUE reads the header line already; drop SKIP_HEADER."
            )
        if kind == "CSV":
            options["header"] = "true" if header_names or skip == "1" else "false"
        for key, value in given.items():
            if key in supported and supported[key] != "header":
                none = key in _NONE_MEANS_EMPTY and value.upper() == "NONE"
                options[supported[key]] = "" if none else value
        return FileFormat(kind, tuple(sorted(options.items())), header_names)

    def reader(
        self, spark: SparkSession, columns: Sequence[tuple[str, str]] | None
    ) -> DataFrameReader:
        """A Spark reader of this format: of ``columns`` ((name, Spark type)), or inferring
        the columns when None."""
        reader = spark.read.format(self.type.lower()).options(**dict(self.options))
        if columns is None:
            return reader.option("inferSchema", "true") if self.type == "CSV" else reader
        return reader.schema(", ".join(f"`{n.replace('`', '``')}` {t}" for n, t in columns))


def _flag(value: str, key: str, *, about: str) -> bool:
    if value.upper() in _TRUE:
        return True
    if value.upper() in _FALSE:
        return False
    raise InvalidStatementError(f"{about}: {key} must be TRUE or FALSE, got {value!r}.")


def check_pattern(pattern: str | None, *, about: str) -> None:
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as e:
        raise InvalidStatementError(
            f"{about}: PATTERN {pattern!r} is not a regular expression ({e})."
        ) from e


@dataclass(frozen=True)
class Stage:
    """The directory a FILES table reads: a local directory or a URI PyArrow and Spark open."""

    location: str  # an absolute local path, or a URI

    @staticmethod
    def at(location: str) -> Stage:
        """The stage at ``location`` (a relative local path is made absolute)."""
        if "://" not in location:
            location = os.path.abspath(location)
        return Stage(location.rstrip("/") or "/")

    def _fs(self) -> tuple[pafs.FileSystem, str]:
        try:
            fs, base = pafs.FileSystem.from_uri(self.location)
        except (ValueError, OSError) as e:
            raise SourceError(f"Cannot open file location {self.location} ({e}).") from e
        return fs, base.rstrip("/")

    def uri(self, path: str) -> str:
        """Where file ``path`` (relative to the stage) is as Spark reads it: that one file, the
        characters Spark would take for a glob escaped."""
        root = self.location if "://" in self.location else f"file://{self.location}"
        return _GLOB.sub(r"\\\1", f"{root.rstrip('/')}/{path}")

    def files(self, pattern: str | None) -> dict[str, ExternalFile]:
        """The files under the stage (recursively) whose relative paths match ``pattern``, by
        relative path, with their size and modification time (seconds)."""
        fs, base = self._fs()
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos = fs.get_file_info(selector)
        except OSError as e:
            raise SourceError(f"Cannot list file location {self.location} ({e}).") from e
        found = {}
        for info in infos:
            if info.type != pafs.FileType.File:
                continue
            path = info.path[len(base) :].lstrip("/")
            if any(part.startswith((".", "_")) for part in path.split("/")):
                continue
            if pattern is not None and re.fullmatch(pattern, path) is None:
                continue
            found[path] = ExternalFile(path, info.size or 0, (info.mtime_ns or 0) / 1e9)
        return found

    def check_parquet_columns(self, paths: Sequence[str], names: Sequence[str]) -> None:
        """SourceError naming the first of the Parquet files ``paths`` (their footers only)
        that lacks one of the columns ``names``, which Spark would read as NULLs."""
        fs, base = self._fs()
        wanted = {n.lower(): n for n in names}
        for path in paths:
            try:
                with fs.open_input_file(f"{base}/{path}") as handle:
                    has = {n.lower() for n in pq.read_schema(handle).names}
            except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
                raise SourceChangedError(
                    f"File {path} under {self.location} is not a readable Parquet file ({e});"
                    " nothing was committed. Fix or remove the file, then try again."
                ) from e
            missing = [n for k, n in wanted.items() if k not in has]
            if missing:
                raise SourceChangedError(
                    f"File {path} under {self.location} has no column(s) {', '.join(missing)}"
                    " of the table; nothing was committed. Fix or remove the file, then try again."
                )

    def load(self, reader: DataFrameReader, paths: Sequence[str]) -> DataFrame:
        """``reader`` loading exactly the files ``paths`` (relative to the stage)."""
        return reader.load([self.uri(p) for p in paths])

    def read_failure(self, e: Exception, paths: Sequence[str]) -> SourceError | None:
        """The SourceError naming the file for Spark failure ``e`` while reading ``paths``;
        None when ``e`` is not about reading them."""
        text = str(e)
        base = self._fs()[1]
        named = [p for p in paths if f"{base}/{p}" in text]
        if not named and not any(c in text for c in _READ_ERRORS):
            return None
        if named:
            which = f"file {max(named, key=len)}"
        else:
            which = f"one of the files {', '.join(paths[:5])}{' …' if len(paths) > 5 else ''}"
        reason = _reason(text)
        return SourceChangedError(
            f"{which[0].upper()}{which[1:]} under {self.location} cannot be read with the table's"
            f" format and columns ({reason}); nothing was committed. Fix or remove the file, then"
            " try again."
        )


def _reason(text: str) -> str:
    """What Spark says is wrong with the file: the detail of its FAILED_READ_FILE line, else
    the innermost cause."""
    found = _DETAIL.search(text)
    detail = _SQLSTATE.sub("", found.group(1)).strip() if found is not None else ""
    causes = _CAUSE.findall(text)
    if not detail:
        detail = _SQLSTATE.sub("", causes[-1]).strip() if causes else text.strip()[:200]
    return detail.rstrip(".") or "Spark gives no detail"


# what a Spark read of bad files raises
READ_FAILURES = (PySparkException, Py4JJavaError)
