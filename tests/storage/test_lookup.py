"""storage.local.lookup: the inlined expressions and the broadcast join give the same rows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from changelake.spark import local
from changelake.spark.local import local_dataframe, lookup

# (size, name) keys: sizes collide on purpose, names tell the files apart.
FILES = [(size, f"f{i}") for i, size in enumerate([10, 10, 20, 30, 30, 30, 40])]


def _run(spark, keys, wanted_rows, *, inline: bool, monkeypatch):
    monkeypatch.setattr(local, "INLINE_ROWS", 100 if inline else 0)
    df = local_dataframe(spark, keys, [("size", "bigint"), ("name", "string")])
    out = lookup(
        df,
        [("size", "bigint"), ("name", "string")],
        [("base", "bigint"), ("tag", "bigint")],
        [
            (size, name, 1000 * i, None if i % 2 else i)
            for i, (size, name) in enumerate(wanted_rows)
        ],
    )
    return sorted(tuple(r) for r in out.collect())


@settings(max_examples=10, deadline=None)
@given(
    rows=st.lists(st.sampled_from(FILES), min_size=0, max_size=12),
    table=st.lists(st.sampled_from(FILES), min_size=0, max_size=7, unique=True),
)
def test_inlined_lookup_equals_the_join_and_a_python_model(spark, rows, table):
    with pytest.MonkeyPatch.context() as mp:
        inlined = _run(spark, rows, table, inline=True, monkeypatch=mp)
        joined = _run(spark, rows, table, inline=False, monkeypatch=mp)
    position = {key: i for i, key in enumerate(table)}
    model = sorted(
        (
            size,
            name,
            1000 * position[(size, name)],
            None if position[(size, name)] % 2 else position[(size, name)],
        )
        for size, name in rows
        if (size, name) in position
    )
    assert inlined == joined == model


def test_an_empty_inlined_lookup_keeps_its_column_types(spark):
    df = local_dataframe(spark, [(10, "f0")], [("size", "bigint"), ("name", "string")])
    out = lookup(df, [("size", "bigint"), ("name", "string")], [("base", "bigint")], [])
    assert out.count() == 0
    assert out.schema["base"].dataType.simpleString() == "bigint"
