"""Ingest channels in the catalog (SQLite and PostgreSQL): opening bumps the epoch, a commit
requires the holder's epoch and previous token (compare-and-set), and a token is committed with
the version that holds its rows, atomically."""

from __future__ import annotations

import pytest
from test_catalog import T0, create, data_file

from changelake.catalog import Catalog
from changelake.catalog.requests import (
    AddFiles,
    AdvanceChannel,
    ChannelHeld,
    CommitRequest,
    DropChannel,
    DropTable,
    OpenChannel,
    TableLive,
)
from changelake.clock import ManualClock
from changelake.errors import ChannelFencedError, ChannelNotFoundError


@pytest.fixture
def catalog(catalog_url):
    c = Catalog(catalog_url)
    yield c
    c.close()


def _open(catalog: Catalog, table_id: int, name: str = "ch", **kw):
    result = catalog.commit(
        [CommitRequest("open", "OPEN CHANNEL", (OpenChannel(table_id, name, **kw),))],
        clock=ManualClock(T0),
    )
    return result.channels[(table_id, name)]


def _ingest(catalog, info, *, epoch, previous, token, files=(), advance_first=False):
    tid = info.table_id
    adds = (AddFiles(tid, tuple(files)),) if files else ()
    advance = (AdvanceChannel(tid, "ch", token),)
    updates = advance + adds if advance_first else adds + advance
    return catalog.commit(
        [
            CommitRequest(
                f"ingest-{token}",
                "INGEST",
                updates,
                (TableLive(tid, info.name), ChannelHeld(tid, info.name, "ch", epoch, previous)),
            )
        ],
        clock=ManualClock(T0 + 1),
    )


def test_opening_bumps_the_epoch_and_keeps_or_resets_the_token(catalog):
    info = create(catalog)
    first = _open(catalog, info.table_id)
    assert (first.epoch, first.offset_token, first.committed_version) == (1, None, None)
    made = _ingest(catalog, info, epoch=1, previous=None, token="5", files=[data_file("a.parquet")])
    again = _open(catalog, info.table_id)
    assert (again.epoch, again.offset_token) == (2, "5")
    assert again.committed_version == made.version_of(info.table_id)
    reset = _open(catalog, info.table_id, offset_token="100", reset_token=True)
    assert (reset.epoch, reset.offset_token, reset.committed_version) == (3, "100", None)
    assert [c.name for c in catalog.list_channels(info.table_id)] == ["ch"]


@pytest.mark.parametrize("advance_first", [False, True])
def test_a_token_is_committed_with_its_version_in_either_order(catalog, advance_first):
    info = create(catalog)
    _open(catalog, info.table_id)
    made = _ingest(
        catalog,
        info,
        epoch=1,
        previous=None,
        token="1",
        files=[data_file("a.parquet")],
        advance_first=advance_first,
    )
    assert made.versions[info.table_id] == [1]
    found = catalog.find_channel(info.table_id, "ch")
    assert (found.offset_token, found.committed_version) == ("1", 1)
    # A token moved by rows that were all rejected makes no version.
    _ingest(catalog, info, epoch=1, previous="1", token="2")
    found = catalog.find_channel(info.table_id, "ch")
    assert (found.offset_token, found.committed_version) == ("2", 1)
    assert catalog.table("people").current_version == 1


def test_an_older_holder_or_a_stale_token_commits_nothing(catalog):
    info = create(catalog)
    _open(catalog, info.table_id)
    _open(catalog, info.table_id)  # epoch 2: the first holder is fenced
    with pytest.raises(ChannelFencedError, match="reopened elsewhere"):
        _ingest(catalog, info, epoch=1, previous=None, token="1", files=[data_file("z.parquet")])
    with pytest.raises(ChannelFencedError, match="committed offset token"):
        _ingest(catalog, info, epoch=2, previous="0", token="1", files=[data_file("z.parquet")])
    assert catalog.table("people").current_version == 0
    assert catalog.snapshot_files(info.table_id, 0) == []
    assert catalog.find_channel(info.table_id, "ch").offset_token is None


def test_dropped_channels_and_tables_fence_their_holders(catalog):
    info = create(catalog)
    _open(catalog, info.table_id)
    catalog.commit(
        [CommitRequest("d", "DROP CHANNEL", (DropChannel(info.table_id, "ch"),))],
        clock=ManualClock(T0),
    )
    with pytest.raises(ChannelFencedError, match="dropped"):
        _ingest(catalog, info, epoch=1, previous=None, token="1")
    with pytest.raises(ChannelNotFoundError, match="'ch'"):
        catalog.commit(
            [CommitRequest("d2", "DROP CHANNEL", (DropChannel(info.table_id, "ch"),))],
            clock=ManualClock(T0),
        )
    with pytest.raises(ChannelNotFoundError):
        catalog.commit(
            [CommitRequest("a", "INGEST", (AdvanceChannel(info.table_id, "ch", "1"),))],
            clock=ManualClock(T0),
        )
    _open(catalog, info.table_id)
    catalog.commit(
        [CommitRequest("dt", "DROP TABLE", (DropTable(info.table_id),))], clock=ManualClock(T0)
    )
    assert catalog.list_channels(info.table_id) == []
