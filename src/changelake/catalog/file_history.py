"""A table's files over a range of versions, read once: what a statement asks of them for any
version or interval in the range, answered without the catalog."""

from __future__ import annotations

from dataclasses import dataclass, replace

from changelake.catalog.model import LiveFile, TrackedFile


@dataclass(frozen=True)
class FileHistory:
    """A table's files over versions ``[since, until]``: every file live at one of them, with
    its DV parts up to ``until``. It answers, for versions in that range, what the catalog's
    ``snapshot_files`` and ``files_changed_between`` do."""

    since: int
    until: int
    files: tuple[TrackedFile, ...]  # in file id order

    def covers(self, first: int, last: int) -> bool:
        return self.since <= first <= last <= self.until

    def live_at(self, version: int) -> list[LiveFile]:
        return [
            LiveFile(
                f.file,
                f.dv_paths(upto_inclusive=version),
                f.deleted_rows(upto_inclusive=version),
            )
            for f in self.files
            if f.live_at(version)
        ]

    def changed_between(self, *, start_exclusive: int, end_inclusive: int) -> list[TrackedFile]:
        s, e = start_exclusive, end_inclusive

        def touched(f: TrackedFile) -> bool:
            begin, end = f.file.begin_version, f.end_version
            return (
                (begin is not None and s < begin <= e)
                or (end is not None and s < end <= e)
                or any(s < v <= e for v, _, _ in f.dvs)
            )

        return [
            replace(f, dvs=tuple(d for d in f.dvs if d[0] <= e)) for f in self.files if touched(f)
        ]
