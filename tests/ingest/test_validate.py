"""Client-side row validation of streaming ingest: per-type rules, row structure, Arrow and pandas
input, and the fast (columnar) path agreeing with the converters value by value."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from changelake.errors import IngestValidationError
from changelake.ingest.validate import InsertError, RowValidator
from changelake.schema import Column, TableSchema

UTC = dt.timezone.utc
NEW_YORK = ZoneInfo("America/New_York")


def one_column(type_name: str, *, nullable: bool = True, **options: Any) -> RowValidator:
    return RowValidator(TableSchema((Column(7, "v", type_name, nullable),)), table="t", **options)


def accepted(type_name: str, value: Any, **options: Any) -> Any:
    result = one_column(type_name, **options).rows([{"v": value}])
    assert result.errors == ()
    return result.good.column("c7")[0].as_py()


def rejection(type_name: str, value: Any) -> InsertError:
    result = one_column(type_name).rows([{"v": value}])
    assert result.good.num_rows == 0
    (error,) = result.errors
    return error


ORDERS = TableSchema(
    (
        Column(1, "id", "bigint", nullable=False),
        Column(2, "name", "string"),
        Column(3, "amount", "decimal(10,2)"),
        Column(4, "ts", "timestamp"),
    )
)


def test_arrow_schema_uses_physical_names_types_and_nullability():
    schema = RowValidator(ORDERS, table="orders").arrow_schema
    assert schema == pa.schema(
        [
            pa.field("c1", pa.int64(), nullable=False),
            pa.field("c2", pa.string()),
            pa.field("c3", pa.decimal128(10, 2)),
            pa.field("c4", pa.timestamp("us", tz="UTC")),
        ]
    )


ACCEPTED = [
    ("int", 5, 5),
    ("int", -(2**31), -(2**31)),
    ("int", Decimal("7"), 7),
    ("int", 3.0, 3),
    ("int", " 42 ", 42),
    ("int", "+7", 7),
    ("bigint", 2**63 - 1, 2**63 - 1),
    ("bigint", Decimal("-1E+3"), -1000),
    ("decimal(5,2)", 1, Decimal("1.00")),
    ("decimal(5,2)", Decimal("1.005"), Decimal("1.01")),
    ("decimal(5,2)", Decimal("-1.005"), Decimal("-1.01")),
    ("decimal(5,2)", 0.125, Decimal("0.13")),
    ("decimal(5,2)", -0.125, Decimal("-0.13")),
    ("decimal(5,2)", 2.675, Decimal("2.68")),  # as written, though the binary float is below
    ("decimal(5,2)", 999.994, Decimal("999.99")),
    ("decimal(5,2)", " 12.345 ", Decimal("12.35")),
    ("decimal(5,2)", "1e2", Decimal("100.00")),
    ("decimal(2,2)", "-0.994", Decimal("-0.99")),
    ("double", 1, 1.0),
    ("double", 2.5, 2.5),
    ("double", Decimal("0.1"), 0.1),
    ("double", " 1e3 ", 1000.0),
    ("double", 2**53 + 1, float(2**53)),
    ("double", "-Infinity", -math.inf),
    ("double", "INF", math.inf),
    ("double", math.inf, math.inf),
    ("boolean", True, True),
    ("boolean", " YES ", True),
    ("boolean", "off", False),
    ("boolean", "t", True),
    ("boolean", "0", False),
    ("boolean", 1, True),
    ("boolean", 0, False),
    ("string", "x", "x"),
    ("string", 5, "5"),
    ("string", 1.5, "1.5"),
    ("string", Decimal("1.50"), "1.50"),
    ("string", True, "true"),
    ("string", False, "false"),
    ("binary", b"\x00\x01", b"\x00\x01"),
    ("binary", bytearray(b"ab"), b"ab"),
    ("binary", memoryview(b"cd"), b"cd"),
    ("binary", "00ff", b"\x00\xff"),
    ("date", dt.date(2024, 2, 29), dt.date(2024, 2, 29)),
    ("date", " 2024-02-29", dt.date(2024, 2, 29)),
    ("timestamp", dt.datetime(2024, 1, 1, 12, 0, 0, 7), dt.datetime(2024, 1, 1, 12, 0, 0, 7, UTC)),
    ("timestamp", dt.date(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=UTC)),
    ("timestamp", "2024-05-01T12:30:00Z", dt.datetime(2024, 5, 1, 12, 30, tzinfo=UTC)),
    ("timestamp", "2024-05-01 12:30:00+02:00", dt.datetime(2024, 5, 1, 10, 30, tzinfo=UTC)),
    (
        "timestamp",
        dt.datetime(2024, 5, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=-4))),
        dt.datetime(2024, 5, 1, 16, tzinfo=UTC),
    ),
    (
        "timestamp",
        pd.Timestamp("2024-01-01 00:00:00.000001999"),
        dt.datetime(2024, 1, 1, 0, 0, 0, 1, UTC),
    ),
]


@pytest.mark.parametrize(("type_name", "value", "expected"), ACCEPTED)
def test_accepted_value_becomes(type_name, value, expected):
    result = accepted(type_name, value)
    assert type(result) is type(expected)
    assert result == expected


def test_double_keeps_nan():
    assert math.isnan(accepted("double", math.nan))
    assert math.isnan(accepted("double", "NaN"))
    assert math.isnan(accepted("double", Decimal("NaN")))


REJECTED = [
    ("int", True, "True is a bool; pass an int"),
    ("int", 2**31, "2147483648 is out of range -2147483648..2147483647."),
    ("bigint", -(2**63) - 1, "is out of range -9223372036854775808..9223372036854775807."),
    ("int", 3.5, "3.5 is not a whole number."),
    ("int", math.nan, "nan is not a whole number."),
    ("int", math.inf, "inf is not a whole number."),
    ("int", Decimal("2.5"), "2.5 is not a whole number."),
    ("int", "4.0", "'4.0' is not an integer literal."),
    ("int", "1_000", "'1_000' is not an integer literal."),
    ("int", b"1", "bytes b'1' is not a number."),
    ("decimal(5,2)", 999.995, "999.995 has 4 digits before the point, at most 3 fit."),
    ("decimal(5,2)", -1000, "-1000 has 4 digits before the point, at most 3 fit."),
    ("decimal(5,2)", Decimal("1e100000000"), "has 100000001 digits before the point"),
    ("decimal(2,2)", 0.995, "0.995 has 1 digits before the point, at most 0 fit."),
    ("decimal(5,2)", math.nan, "nan is not a finite number."),
    ("decimal(5,2)", Decimal("-Infinity"), "-Infinity is not a finite number."),
    ("decimal(5,2)", "NaN", "'NaN' is not a decimal literal."),
    ("decimal(5,2)", True, "True is a bool"),
    ("double", False, "False is a bool"),
    ("double", "1e400", "'1e400' is too large for a DOUBLE."),
    ("double", 10**400, "is too large for a DOUBLE."),
    ("double", Decimal("1e400"), "1E+400 is too large for a DOUBLE."),
    ("double", Decimal("sNaN"), "is a signaling NaN."),
    ("double", "-nan", "'-nan' is not a number literal."),
    ("double", "abc", "'abc' is not a number literal."),
    ("boolean", 2, "2 is not a boolean"),
    ("boolean", 1.0, "1.0 is not a boolean"),
    ("boolean", "maybe", "'maybe' is not a boolean; use true/false"),
    ("string", b"x", "bytes b'x' is not text; pass a str."),
    ("string", ["a"], "list ['a'] is not text"),
    ("string", {"a": 1}, "dict {'a': 1} is not text"),
    ("string", "a\ud800", "is not valid Unicode (a lone surrogate)."),
    (
        "string",
        "é" * (8 * 1024 * 1024 + 1),
        "the text is 16777218 bytes in UTF-8, at most 16777216",
    ),
    ("binary", "zz", "'zz' is not hex; pass bytes or a hex string."),
    ("binary", 5, "int 5 is not bytes or a hex string."),
    ("binary", b"x" * (8 * 1024 * 1024 + 1), "the value is 8388609 bytes, at most 8388608 fit."),
    ("date", dt.datetime(2024, 1, 1, 5), "is a datetime; pass .date() to store the day."),
    ("date", "2024-02-30", "'2024-02-30' is not a date in the form YYYY-MM-DD."),
    ("date", "20240101", "'20240101' is not a date in the form YYYY-MM-DD."),
    ("date", 20240101, "int 20240101 is not a date."),
    ("timestamp", "yesterday", "'yesterday' is not an ISO 8601 timestamp"),
    ("timestamp", 1704067200, "int 1704067200 is not a datetime."),
]


@pytest.mark.parametrize(("type_name", "value", "message"), REJECTED)
def test_rejected_value_says_why(type_name, value, message):
    error = rejection(type_name, value)
    assert (error.row_index, error.column, error.row) == (0, "v", {"v": value})
    assert error.value is value
    assert error.message.startswith(f"Column 'v' is {type_name.upper()}: ")
    assert message in error.message


def test_decimal_overflow_message_is_exact():
    error = RowValidator(ORDERS, table="orders").rows([{"id": 1, "amount": 123456789.5}]).errors[0]
    assert error.message == (
        "Column 'amount' is DECIMAL(10,2): 123456789.5 has 9 digits before the point, at most 8 fit."
    )


def test_not_null_column_rejects_none_and_missing_keys():
    result = RowValidator(ORDERS, table="orders").rows([{"id": None}, {"name": "a"}, {"id": 3}])
    assert [(e.row_index, e.column, e.value) for e in result.errors] == [
        (0, "id", None),
        (1, "id", None),
    ]
    assert result.errors[0].message == "Column 'id' is NOT NULL but the row has no value for it."
    assert result.good.column("c1").to_pylist() == [3]
    assert result.good.column("c2").to_pylist() == [None]
    assert result.total == 3


def test_keys_match_columns_case_insensitively():
    result = RowValidator(ORDERS, table="orders").rows([{"ID": 1, "Name": "a"}, {"id": 2}])
    assert result.errors == ()
    assert result.good.column("c1").to_pylist() == [1, 2]
    assert result.good.column("c2").to_pylist() == ["a", None]


def test_unknown_key_rejects_the_row_and_suggests_a_column():
    row = {"id": 1, "nmae": "x", "zzz": 2}
    result = RowValidator(ORDERS, table="orders").rows([row, {"id": 2}])
    (error,) = result.errors
    assert (error.row_index, error.column, error.value, error.row) == (
        0,
        None,
        {"nmae": "x", "zzz": 2},
        row,
    )
    assert error.message == (
        "Key 'nmae' matches no column of table orders. Did you mean name?"
        " Key 'zzz' matches no column of table orders. Its columns are: id, name, amount, ts."
    )
    assert result.good.column("c1").to_pylist() == [2]


def test_keys_differing_only_in_case_reject_the_row():
    result = RowValidator(ORDERS, table="orders").rows([{"id": 1, "ID": 2, "name": "a"}])
    (error,) = result.errors
    assert (error.column, error.value) == ("id", {"id": 1, "ID": 2})
    assert "Keys 'id' and 'ID' both name column 'id'" in error.message
    assert result.good.num_rows == 0


def test_row_that_is_not_a_mapping_is_one_row_level_error():
    result = RowValidator(ORDERS, table="orders").rows([{"id": 1}, [1, "a"], None])
    assert [(e.row_index, e.column, e.value) for e in result.errors] == [
        (1, None, [1, "a"]),
        (2, None, None),
    ]
    assert "Row 1 is not a mapping of column name to value but a list" in result.errors[0].message
    assert result.good.column("c1").to_pylist() == [1]


def test_every_bad_column_of_a_row_is_reported_in_table_order():
    rows = [{"ts": "soon", "amount": "x", "id": "one", "bogus": 1}, {"id": 5, "name": "ok"}]
    result = RowValidator(ORDERS, table="orders").rows(rows)
    assert [(e.row_index, e.column) for e in result.errors] == [
        (0, None),
        (0, "id"),
        (0, "amount"),
        (0, "ts"),
    ]
    assert result.good.to_pylist() == [{"c1": 5, "c2": "ok", "c3": None, "c4": None}]


def test_good_rows_keep_input_order_around_bad_ones():
    rows = [{"id": i, "amount": "bad" if i % 3 == 1 else i} for i in range(9)]
    result = RowValidator(ORDERS, table="orders").rows(rows)
    assert [e.row_index for e in result.errors] == [1, 4, 7]
    assert result.good.column("c1").to_pylist() == [0, 2, 3, 5, 6, 8]
    assert result.good.column("c3").to_pylist()[1] == Decimal("2.00")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (dt.datetime(2024, 1, 15, 12), dt.datetime(2024, 1, 15, 17, tzinfo=UTC)),
        (dt.datetime(2024, 7, 15, 12), dt.datetime(2024, 7, 15, 16, tzinfo=UTC)),
        (dt.date(2024, 7, 15), dt.datetime(2024, 7, 15, 4, tzinfo=UTC)),
        ("2024-07-15T12:00:00", dt.datetime(2024, 7, 15, 16, tzinfo=UTC)),
        ("2024-07-15T12:00:00Z", dt.datetime(2024, 7, 15, 12, tzinfo=UTC)),
        (dt.datetime(2024, 7, 15, 12, tzinfo=UTC), dt.datetime(2024, 7, 15, 12, tzinfo=UTC)),
        # 01:30 happens twice on 2024-11-03: the first (EDT) unless fold=1 (EST).
        (dt.datetime(2024, 11, 3, 1, 30), dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC)),
        (dt.datetime(2024, 11, 3, 1, 30, fold=1), dt.datetime(2024, 11, 3, 6, 30, tzinfo=UTC)),
        # 02:30 never happens on 2024-03-10: moved forward by the hour, to 03:30 EDT.
        (dt.datetime(2024, 3, 10, 2, 30), dt.datetime(2024, 3, 10, 7, 30, tzinfo=UTC)),
    ],
)
def test_naive_timestamps_are_wall_time_in_the_default_timezone(value, expected):
    assert accepted("timestamp", value, default_timezone="America/New_York") == expected


def test_naive_timestamps_default_to_utc():
    assert accepted("timestamp", dt.datetime(2024, 7, 15, 12)) == dt.datetime(
        2024, 7, 15, 12, tzinfo=UTC
    )


def test_unknown_default_timezone_is_rejected():
    with pytest.raises(IngestValidationError, match="Unknown time zone 'Mars/Base'"):
        one_column("timestamp", default_timezone="Mars/Base")


# Arrow and pandas input


def test_arrow_input_reports_bad_rows_and_keeps_the_rest():
    data = pa.table(
        {
            "ID": pa.array([1, 2, None, 4], pa.int64()),
            "amount": pa.array(["1.005", "x", "3", "123456789"]),
            "ts": pa.array([0, 1, 2, 3], pa.timestamp("s")),
        }
    )
    result = RowValidator(ORDERS, table="orders").arrow(data)
    assert [(e.row_index, e.column, e.value) for e in result.errors] == [
        (1, "amount", "x"),
        (2, "id", None),
        (3, "amount", "123456789"),
    ]
    assert result.errors[0].row == {"ID": 2, "amount": "x", "ts": dt.datetime(1970, 1, 1, 0, 0, 1)}
    assert result.good.to_pylist() == [
        {"c1": 1, "c2": None, "c3": Decimal("1.01"), "c4": dt.datetime(1970, 1, 1, tzinfo=UTC)}
    ]
    assert result.total == 4


def test_arrow_int_overflow_and_fractions_are_per_row_errors():
    validator = one_column("int")
    result = validator.arrow(pa.table({"v": pa.array([1, 2**40, -3], pa.int64())}))
    assert [(e.row_index, e.value) for e in result.errors] == [(1, 2**40)]
    assert "out of range -2147483648..2147483647" in result.errors[0].message
    assert result.good.column("c7").to_pylist() == [1, -3]
    floats = validator.arrow(pa.table({"v": [1.0, 2.5, math.nan]}))
    assert [e.row_index for e in floats.errors] == [1, 2]
    assert floats.good.column("c7").to_pylist() == [1]


def test_arrow_ints_into_boolean_must_be_zero_or_one():
    result = one_column("boolean").arrow(pa.table({"v": [0, 1, 2]}))
    assert [e.row_index for e in result.errors] == [2]
    assert result.good.column("c7").to_pylist() == [False, True]


def test_arrow_naive_timestamps_are_wall_time_in_the_default_timezone():
    naive = [dt.datetime(2024, 1, 15, 12), dt.datetime(2024, 11, 3, 1, 30)]
    gap = [*naive, dt.datetime(2024, 3, 10, 2, 30)]
    validator = one_column("timestamp", default_timezone="America/New_York")
    expected = [
        dt.datetime(2024, 1, 15, 17, tzinfo=UTC),
        dt.datetime(2024, 11, 3, 5, 30, tzinfo=UTC),
        dt.datetime(2024, 3, 10, 7, 30, tzinfo=UTC),
    ]
    for values in (naive, gap):
        result = validator.arrow(pa.table({"v": pa.array(values, pa.timestamp("ns"))}))
        assert result.errors == ()
        assert result.good.column("c7").to_pylist() == expected[: len(values)]


def test_arrow_aware_timestamps_become_utc():
    berlin = pa.array([dt.datetime(2024, 7, 1, 10)], pa.timestamp("ns")).cast(
        pa.timestamp("ns", tz="Europe/Berlin")
    )
    good = one_column("timestamp", default_timezone="America/New_York").arrow(
        pa.table({"v": berlin})
    )
    assert good.good.column("c7").type == pa.timestamp("us", tz="UTC")
    assert good.good.column("c7").to_pylist() == [dt.datetime(2024, 7, 1, 10, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"id": [1], "nmae": ["a"]}, "Input column 'nmae' matches no column of table orders."),
        ({"name": ["a"]}, "NOT NULL columns missing from the input: id."),
        ({"id": [1], "ID": [2]}, "Input columns 'id' and 'ID' both name column 'id'"),
        (
            {"id": [b"1"]},
            "Input column 'id' is binary, which cannot become column 'id' of type BIGINT.",
        ),
        ({"id": [True]}, "Input column 'id' is bool, which cannot become column 'id'"),
    ],
)
def test_arrow_schema_problems_reject_the_whole_call(columns, message):
    with pytest.raises(IngestValidationError) as raised:
        RowValidator(ORDERS, table="orders").arrow(pa.table(columns))
    assert message in str(raised.value)
    assert "The table's columns are: id BIGINT NOT NULL, name STRING" in str(raised.value)


def test_arrow_timestamp_into_date_is_a_schema_problem():
    data = pa.table({"v": pa.array([dt.datetime(2024, 1, 1)])})
    with pytest.raises(IngestValidationError, match="cannot become column 'v' of type DATE"):
        one_column("date").arrow(data)


def test_record_batch_input():
    batch = pa.record_batch({"id": pa.array([7], pa.int32()), "name": ["x"]})
    result = RowValidator(ORDERS, table="orders").arrow(batch)
    assert result.good.to_pylist() == [{"c1": 7, "c2": "x", "c3": None, "c4": None}]


def test_pandas_input_treats_nan_as_null_and_checks_object_columns_per_row():
    frame = pd.DataFrame(
        {
            "id": pd.Series([1, "2", "x"], dtype=object),
            "amount": [1.5, math.nan, 2.0],
            "ts": pd.to_datetime(["2024-01-01", None, "2024-01-03"]),
        }
    )
    result = RowValidator(ORDERS, table="orders").arrow(frame)
    assert [(e.row_index, e.column, e.value) for e in result.errors] == [(2, "id", "x")]
    assert result.good.to_pylist() == [
        {"c1": 1, "c2": None, "c3": Decimal("1.50"), "c4": dt.datetime(2024, 1, 1, tzinfo=UTC)},
        {"c1": 2, "c2": None, "c3": None, "c4": None},
    ]


def test_arrow_input_matches_rows_input_for_valid_typed_data():
    rows = [
        {"id": i, "name": f"n{i}", "amount": Decimal(i) / 4, "ts": dt.datetime(2024, 1, 1, i)}
        for i in range(5)
    ]
    validator = RowValidator(ORDERS, table="orders", default_timezone="America/New_York")
    from_rows = validator.rows(rows).good
    from_arrow = validator.arrow(pa.Table.from_pylist(rows)).good
    assert from_arrow.equals(from_rows)
    assert from_arrow.column("c4")[0].as_py() == dt.datetime(2024, 1, 1, 5, tzinfo=UTC)


# The columnar fast path agrees with the converters


ALL_TYPES = TableSchema(
    tuple(
        Column(i + 1, name, type_name, nullable)
        for i, (name, type_name, nullable) in enumerate(
            [
                ("i", "int", False),
                ("b", "bigint", True),
                ("d", "double", True),
                ("m", "decimal(6,2)", True),
                ("f", "boolean", True),
                ("s", "string", True),
                ("x", "binary", True),
                ("day", "date", True),
                ("ts", "timestamp", True),
            ]
        )
    )
)

_datetimes = st.datetimes(
    min_value=dt.datetime(1900, 1, 1),
    max_value=dt.datetime(2200, 1, 1),
    timezones=st.none() | st.just(UTC) | st.just(NEW_YORK),
    allow_imaginary=True,
)
_any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-(2**31), max_value=2**31),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(places=3, max_value=10**6, min_value=-(10**6)),
    st.sampled_from([Decimal("NaN"), Decimal("sNaN"), Decimal("-Infinity"), Decimal("1e400")]),
    st.text(max_size=8),
    st.sampled_from(["42", " 7 ", "1.5", "NaN", "-inf", "yes", "2024-01-02", "00ff", "\ud800"]),
    st.binary(max_size=4),
    st.dates(),
    _datetimes,
    st.lists(st.integers(), max_size=2),
)
# Values of the types each column builds with pa.array directly, so batches often take that path.
_typical = {
    "i": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "b": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "d": st.floats() | st.integers(min_value=-(2**60), max_value=2**60),
    "m": st.decimals(places=2, min_value=-9999, max_value=9999)
    | st.integers(-9999, 9999)
    | st.floats(-1e4, 1e4),
    "f": st.booleans(),
    "s": st.text(max_size=8),
    "x": st.binary(max_size=4),
    "day": st.dates(),
    "ts": st.datetimes(timezones=st.none() | st.just(UTC) | st.just(NEW_YORK)),
}


@st.composite
def batches(draw):
    mixed = {name: draw(st.booleans()) for name in _typical}
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=8))):
        row = {}
        for name, typical in _typical.items():
            if draw(st.integers(0, 9)) == 0:
                continue  # missing key: NULL
            strategy = typical | _any_value if mixed[name] else typical | st.none()
            row[name] = draw(strategy)
        rows.append(row)
    return rows


def _comparable(result) -> tuple[list, list]:
    def plain(value):
        return "NaN" if isinstance(value, float) and math.isnan(value) else value

    good = [{k: plain(v) for k, v in row.items()} for row in result.good.to_pylist()]
    errors = [(e.row_index, e.column, e.message) for e in result.errors]
    return good, errors


def _converters_only(validator: RowValidator) -> RowValidator:
    # No type is trusted to pa.array: every value goes through its column's converter.
    validator._fast = [frozenset() for _ in validator._fast]
    return validator


@pytest.mark.parametrize("zone", ["UTC", "America/New_York"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=batches())
def test_whole_batches_agree_with_one_row_at_a_time_and_with_the_converters(zone, rows):
    validator = RowValidator(ALL_TYPES, table="t", default_timezone=zone)
    reference = _converters_only(RowValidator(ALL_TYPES, table="t", default_timezone=zone))
    batch = validator.rows(rows)
    one_by_one_good, one_by_one_errors = [], []
    for index, row in enumerate(rows):
        good, errors = _comparable(validator.rows([row]))
        one_by_one_good += good
        one_by_one_errors += [(index, column, message) for _, column, message in errors]
    assert _comparable(batch) == (one_by_one_good, one_by_one_errors)
    assert _comparable(batch) == _comparable(reference.rows(rows))
    assert batch.total == len(rows)
    assert batch.good.num_rows + len({e.row_index for e in batch.errors}) == len(rows)
