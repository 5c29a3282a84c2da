"""Connections and external tables in the grammar: each statement parses into its typed value
(golden pairs), and malformed ones fail with an InvalidStatementError that names the statement
and says what to write. Pure parsing: no Spark."""

from __future__ import annotations

import pytest

from changelake.dialect import parse_one
from changelake.errors import InvalidStatementError, SqlSyntaxError
from changelake.sql import external as x
from changelake.sql import statements as s


def typed(text: str) -> s.Statement:
    return s.statement_of(parse_one(text))


def _external(name: str = "e", **fields: object) -> x.CreateExternalTable:
    defaults: dict[str, object] = dict(
        name=name,
        columns=None,
        keys=None,
        scope="ALL",
        follow_lag=None,
        comment="",
        replace=False,
        if_not_exists=False,
    )
    return x.CreateExternalTable(**{**defaults, **fields})  # type: ignore[arg-type]


PG = x.PostgresSource("pg", "public.orders")
PARQUET = x.FilesSource("/data/orders", {"TYPE": "PARQUET"}, None)

GOLDEN = {
    "CREATE CONNECTION pg TYPE = POSTGRES OPTIONS (host => 'db.local', port => 5432,"
    " user = 'me', password => 'it''s', sslmode => require, timeout => -1)": x.CreateConnection(
        "pg",
        "POSTGRES",
        {
            "host": "db.local",
            "port": "5432",
            "user": "me",
            "password": "it's",
            "sslmode": "require",
            "timeout": "-1",
        },
        replace=False,
        if_not_exists=False,
    ),
    "create or replace connection pg type = postgres options (HOST => 'h')": x.CreateConnection(
        "pg", "POSTGRES", {"host": "h"}, replace=True, if_not_exists=False
    ),
    "CREATE CONNECTION IF NOT EXISTS pg TYPE = Postgres OPTIONS ();": x.CreateConnection(
        "pg", "POSTGRES", {}, replace=False, if_not_exists=True
    ),
    "CREATE CONNECTION pg TYPE = POSTGRES": x.CreateConnection(
        "pg", "POSTGRES", {}, replace=False, if_not_exists=False
    ),
    "DROP CONNECTION pg": x.DropConnection("pg", False),
    "drop connection if exists pg;": x.DropConnection("pg", True),
    "SHOW CONNECTIONS": s.Show("CONNECTIONS"),
    "show external tables": s.Show("EXTERNAL TABLES"),
    "SHOW TABLES": s.Show("TABLES"),
    "SHOW DYNAMIC TABLES": s.Show("DYNAMIC TABLES"),
    "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'public.orders'": _external(source=PG),
    "CREATE OR REPLACE EXTERNAL TABLE e (id INT, amount DECIMAL(10,2), note string)"
    " FROM CONNECTION pg TABLE 'public.orders' KEYS (id, note) SCOPE = dependents"
    " FOLLOW_LAG = '1 second' COMMENT = 'orders, live'": _external(
        columns=(("id", "INT"), ("amount", "DECIMAL(10,2)"), ("note", "string")),
        source=PG,
        keys=("id", "note"),
        scope="DEPENDENTS",
        follow_lag="1 second",
        comment="orders, live",
        replace=True,
    ),
    "create external table if not exists e from connection pg table 'public.orders'"
    " comment = 'c', follow_lag = '2 minutes', scope = all, keys (id)": _external(
        source=PG,
        keys=("id",),
        follow_lag="2 minutes",
        comment="c",
        if_not_exists=True,
    ),
    "CREATE EXTERNAL TABLE e FROM FILES '/data/orders' FILE_FORMAT = (TYPE = PARQUET)": _external(
        source=PARQUET
    ),
    "CREATE EXTERNAL TABLE e (a int, b timestamp) FROM FILES 's3://bucket/logs/'"
    " PATTERN = '.*[.]csv' FILE_FORMAT = (type = csv, FIELD_DELIMITER = ';' skip_header = 1)"
    " FOLLOW_LAG = '1 minute' COMMENT = 'logs'": _external(
        columns=(("a", "int"), ("b", "timestamp")),
        source=x.FilesSource(
            "s3://bucket/logs/",
            {"TYPE": "CSV", "FIELD_DELIMITER": ";", "SKIP_HEADER": "1"},
            ".*[.]csv",
        ),
        follow_lag="1 minute",
        comment="logs",
    ),
    "CREATE EXTERNAL TABLE e FROM FILES '/j' FILE_FORMAT = (TYPE = json)": _external(
        source=x.FilesSource("/j", {"TYPE": "JSON"}, None)
    ),
    "ALTER EXTERNAL TABLE e REFRESH": x.AlterExternalTable("e", "REFRESH", {}),
    "alter external table e suspend": x.AlterExternalTable("e", "SUSPEND", {}),
    "ALTER EXTERNAL TABLE e RESUME;": x.AlterExternalTable("e", "RESUME", {}),
    "ALTER EXTERNAL TABLE e SET FOLLOW_LAG = '5 minutes'": x.AlterExternalTable(
        "e", "SET", {"FOLLOW_LAG": "5 minutes"}
    ),
    "ALTER EXTERNAL TABLE e SET FOLLOW_LAG = '5 minutes', COMMENT = 'slow'": x.AlterExternalTable(
        "e", "SET", {"FOLLOW_LAG": "5 minutes", "COMMENT": "slow"}
    ),
    "DROP EXTERNAL TABLE e": x.DropExternalTable("e", False),
    "DROP EXTERNAL TABLE IF EXISTS e;": x.DropExternalTable("e", True),
    "DESCRIBE EXTERNAL TABLE e": x.DescribeExternalTable("e"),
    "desc external table e": x.DescribeExternalTable("e"),
}


@pytest.mark.parametrize("text", list(GOLDEN))
def test_statements_parse_into_their_typed_values(text):
    assert typed(text) == GOLDEN[text]


def test_typed_values_do_not_share_the_parsed_tree():
    text = "ALTER EXTERNAL TABLE e SET COMMENT = 'c'"
    first = typed(text)
    first.options["COMMENT"] = "changed"
    assert typed(text).options == {"COMMENT": "c"}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("CREATE STREAM s ON EXTERNAL TABLE e", dict(on_external=True, append_only=False)),
        (
            "create or replace stream s on external table e insert_only = true comment = 'c'",
            dict(on_external=True, append_only=True, replace=True, comment="c"),
        ),
        ("CREATE STREAM s ON EXTERNAL TABLE e INSERT_ONLY = FALSE", dict(append_only=False)),
        ("CREATE STREAM s ON EXTERNAL TABLE e APPEND_ONLY = TRUE", dict(append_only=True)),
        # what was there before keeps parsing as it did
        (
            "CREATE STREAM s ON TABLE t APPEND_ONLY = TRUE",
            dict(on_external=False, on_view=False, append_only=True),
        ),
        ("CREATE STREAM s ON DYNAMIC TABLE d", dict(on_external=False, table="d")),
        ("CREATE STREAM s ON VIEW v", dict(on_external=False, on_view=True)),
    ],
)
def test_streams_on_external_tables(text, expected):
    stmt = typed(text)
    assert isinstance(stmt, s.CreateStream)
    assert stmt.name == "s"
    for key, value in expected.items():
        assert getattr(stmt, key) == value, key


@pytest.mark.parametrize(
    "text, message",
    [
        # connections
        (
            "CREATE CONNECTION pg TYPE = MYSQL OPTIONS (host => 'h')",
            "CREATE CONNECTION pg: TYPE = 'MYSQL' is not a connection type; the supported types"
            " are POSTGRES",
        ),
        ("CREATE CONNECTION pg OPTIONS (host => 'h')", "CREATE CONNECTION pg: expected TYPE ="),
        (
            "CREATE CONNECTION pg TYPE = POSTGRES OPTIONS (host => 'a', HOST => 'b')",
            "option host is given twice",
        ),
        (
            "CREATE CONNECTION pg TYPE = POSTGRES OPTIONS (host 'a')",
            "expected host => <value>",
        ),
        (
            "CREATE CONNECTION pg TYPE = POSTGRES OPTIONS (host => 'a' port => 1)",
            "expected ',' or '\\)' after option host",
        ),
        ("CREATE CONNECTION pg TYPE = POSTGRES OPTIONS (host => )", "expected one value"),
        ("CREATE CONNECTION pg TYPE = POSTGRES OPTIONS host => 'h'", "expected OPTIONS \\("),
        (
            "CREATE OR REPLACE CONNECTION IF NOT EXISTS pg TYPE = POSTGRES",
            "OR REPLACE and IF NOT EXISTS exclude each other",
        ),
        ("CREATE CONNECTION", "expected the name of the connection, found the end"),
        ("DROP CONNECTION pg, other", "Unexpected text in DROP CONNECTION pg"),
        # external tables
        (
            "CREATE EXTERNAL TABLE e LOCATION '/x'",
            "CREATE EXTERNAL TABLE e: expected FROM CONNECTION conn TABLE",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE public.orders",
            "expected TABLE '<schema>.<table>' after FROM CONNECTION pg",
        ),
        ("CREATE EXTERNAL TABLE e FROM FILES /data", "expected FROM FILES '<directory or URI>'"),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' FILE_FORMAT = (TYPE = PARQUET) KEYS (id)",
            "KEYS applies to external tables FROM CONNECTION, not FROM FILES",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' SCOPE = ALL FILE_FORMAT = (TYPE = PARQUET)",
            "SCOPE applies to external tables FROM CONNECTION, not FROM FILES",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' PATTERN = '.*'",
            "PATTERN applies to external tables FROM FILES",
        ),
        ("CREATE EXTERNAL TABLE e FROM FILES '/d'", "FROM FILES needs FILE_FORMAT"),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' FILE_FORMAT = (TYPE = AVRO)",
            "FILE_FORMAT needs TYPE = PARQUET \\| CSV \\| JSON, got TYPE = 'AVRO'",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' FILE_FORMAT = (SKIP_HEADER = 1)",
            "FILE_FORMAT needs TYPE = PARQUET \\| CSV \\| JSON, got no TYPE",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' FILE_FORMAT = PARQUET",
            "expected FILE_FORMAT = \\(...\\)",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM FILES '/d' FILE_FORMAT = (TYPE = CSV, TYPE = JSON)",
            "FILE_FORMAT option TYPE is given twice",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' SCOPE = SOME",
            "SCOPE takes ALL or DEPENDENTS, got 'SOME'",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' FOLLOW_LAG = 5",
            "FOLLOW_LAG takes a quoted string, e.g. FOLLOW_LAG = '1 minute'",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' COMMENT = 'a' COMMENT = 'b'",
            "COMMENT is given twice",
        ),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' KEYS (a) KEYS (b)",
            "KEYS is given twice",
        ),
        ("CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' KEYS a", "expected KEYS \\("),
        (
            "CREATE EXTERNAL TABLE e FROM CONNECTION pg TABLE 'a.b' TARGET_LAG = '1 minute'",
            "Unexpected text in CREATE EXTERNAL TABLE e: 'TARGET_LAG'. After FROM CONNECTION",
        ),
        (
            "CREATE EXTERNAL TABLE e (a INT, b) FROM FILES '/d' FILE_FORMAT = (TYPE = CSV)",
            "expected the type of column b",
        ),
        ("CREATE EXTERNAL TABLE e (a INT FROM FILES '/d'", "the column list is not closed"),
        (
            "CREATE OR REPLACE EXTERNAL TABLE IF NOT EXISTS e FROM FILES '/d'",
            "OR REPLACE and IF NOT EXISTS exclude each other",
        ),
        ("ALTER EXTERNAL TABLE e REBUILD", "expected REFRESH, SUSPEND, RESUME or SET"),
        ("ALTER EXTERNAL TABLE e SET SCOPE = ALL", "the other options are fixed at CREATE"),
        ("ALTER EXTERNAL TABLE e SET", "ALTER EXTERNAL TABLE e SET: expected FOLLOW_LAG"),
        ("ALTER EXTERNAL TABLE e REFRESH now", "Unexpected text in ALTER EXTERNAL TABLE e"),
        ("DROP EXTERNAL TABLE", "DROP EXTERNAL TABLE: expected the name of the external table"),
        ("DESCRIBE EXTERNAL TABLE e x", "Unexpected text in DESCRIBE EXTERNAL TABLE e"),
        # streams
        (
            "CREATE STREAM s ON TABLE t INSERT_ONLY = TRUE",
            "INSERT_ONLY applies to streams on external tables; use APPEND_ONLY = TRUE",
        ),
        (
            "CREATE STREAM s ON EXTERNAL TABLE e INSERT_ONLY = TRUE APPEND_ONLY = TRUE",
            "APPEND_ONLY and INSERT_ONLY say the same",
        ),
        (
            "CREATE STREAM s ON EXTERNAL TABLE e INSERT_ONLY = TRUE INSERT_ONLY = FALSE",
            "INSERT_ONLY is given twice",
        ),
        ("CREATE STREAM s ON EXTERNAL VIEW v", "expected ON EXTERNAL TABLE <name>"),
    ],
)
def test_malformed_statements_say_what_to_write(text, message):
    with pytest.raises(InvalidStatementError, match=message) as caught:
        typed(text)
    assert "sqlglot" not in str(caught.value) and "Token" not in str(caught.value)


def test_show_lists_the_new_kinds_when_it_fails():
    with pytest.raises(SqlSyntaxError, match="EXTERNAL TABLES or CONNECTIONS"):
        typed("SHOW FUNCTIONS")
