"""What dbt users rely on beyond dbt's own test classes, in both connection modes: a table model
replaced atomically with its history kept, an incremental model reading a STREAM (each change
once), changelake's errors shown as dbt's database errors with the statement, and the catalog
of ``dbt docs generate`` (types, row counts)."""

from __future__ import annotations

import json

import pytest
from dbt.tests.util import run_dbt, run_dbt_and_capture, write_file


def rows_of(project, sql: str) -> list[tuple]:
    return sorted(tuple(r) for r in project.run_sql(sql, fetch="all"))


@pytest.mark.usefixtures("fresh_models")
class TestTableModel:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "people.sql": "{{ config(materialized='table') }}"
            " select 1 as id, 'ann' as name union all select 2, 'bob'",
            "names.sql": "{{ config(materialized='view') }} select name from {{ ref('people') }}",
        }

    def test_a_rebuild_is_one_new_version_and_time_travel_reads_the_old(self, project):
        s = project.test_schema
        run_dbt(["run"])
        write_file(
            "{{ config(materialized='table') }} select 1 as id, 'ann' as name union all select 3, 'cy'",
            project.project_root,
            "models",
            "people.sql",
        )
        run_dbt(["run"])  # the view on it stays: the table is the same table
        assert rows_of(project, f"select * from {s}.names") == [("ann",), ("cy",)]
        history = project.run_sql(f"DESCRIBE HISTORY {s}.people", fetch="all")
        assert [h[2] for h in history][-2:] == ["CREATE TABLE AS SELECT", "INSERT OVERWRITE"]
        first = rows_of(project, f"select * from {s}.people AT (VERSION => 0)")
        assert first == [(1, "ann"), (2, "bob")]

        # new columns: the table is replaced (it has no dependents once the view is gone)
        project.run_sql(f"DROP VIEW {s}.names")
        write_file(
            "select 1 as id, 'ann' as name, true as ok",
            project.project_root,
            "models",
            "people.sql",
        )
        run_dbt(["run", "-s", "people"])
        assert rows_of(project, f"select * from {s}.people") == [(1, "ann", True)]


class TestIncrementalFromAStream:
    """The pattern in the README: an incremental model over a changelake STREAM takes each
    change exactly once; its INSERT consumes the stream in the same commit."""

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "order_log.sql": "{{ config(materialized='incremental') }}\n"
            "select id, amount, METADATA$ACTION as action from {{ target.schema }}.orders_stream",
        }

    def test_each_change_once(self, project):
        s = project.test_schema
        project.run_sql(f"CREATE TABLE {s}.orders (id INT, amount INT)")
        project.run_sql(f"CREATE STREAM {s}.orders_stream ON TABLE {s}.orders")
        project.run_sql(f"INSERT INTO {s}.orders VALUES (1, 10), (2, 20)")
        run_dbt(["run"])
        project.run_sql(f"INSERT INTO {s}.orders VALUES (3, 30)")
        project.run_sql(f"DELETE FROM {s}.orders WHERE id = 1")
        run_dbt(["run"])
        run_dbt(["run"])  # nothing new: nothing added
        assert rows_of(project, f"select * from {s}.order_log") == [
            (1, 10, "DELETE"),
            (1, 10, "INSERT"),
            (2, 20, "INSERT"),
            (3, 30, "INSERT"),
        ]
        # each run is one write of the table (no staging table); the run with nothing new
        # commits nothing
        history = project.run_sql(f"DESCRIBE HISTORY {s}.order_log", fetch="all")
        assert [h[2] for h in history] == ["CREATE TABLE AS SELECT", "INSERT"]
        tables = [r[0] for r in project.run_sql("SHOW TABLES", fetch="all")]
        assert not [name for name in tables if "dbt_tmp" in name], tables
        has_data = project.run_sql(
            f"SELECT SYSTEM$STREAM_HAS_DATA('{s}__orders_stream')", fetch="one"
        )
        assert has_data[0] is False


class TestErrors:
    @pytest.fixture(scope="class")
    def models(self):
        return {
            "broken.sql": "select id, nme from {{ ref('base') }}",
            "base.sql": "select 1 as id",
            "divide.sql": "{{ config(materialized='table') }} select 1 / 0 as x",
        }

    def test_a_changelake_error_is_a_database_error_with_its_statement(self, project):
        _, log = run_dbt_and_capture(["run"], expect_pass=False)
        assert "Database Error in model broken" in log
        assert "Column nme does not exist" in log
        assert "in statement:" in log and "select id, nme from" in log
        assert "Traceback" not in log and "py4j" not in log and "org.apache" not in log

    def test_a_runtime_error_inside_the_query_is_shown_as_changelake_says_it(self, project):
        _, log = run_dbt_and_capture(["run", "-s", "divide"], expect_pass=False)
        assert "Database Error in model divide" in log and "ivision by zero" in log
        assert "Traceback" not in log and "org.apache" not in log


class TestDocs:
    @pytest.fixture(scope="class")
    def seeds(self):
        return {"fruit.csv": "id,name,price\n1,apple,1.5\n2,pear,2\n3,fig,\n"}

    @pytest.fixture(scope="class")
    def models(self):
        return {
            "cheap.sql": "{{ config(materialized='table') }}"
            " select id, name from {{ ref('fruit') }} where price < 2",
            "all_names.sql": "select name from {{ ref('fruit') }}",
        }

    def test_the_catalog_has_types_and_row_counts(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        run_dbt(["docs", "generate"])
        catalog = json.loads((project.project_root / "target" / "catalog.json").read_text("utf-8"))
        cheap = catalog["nodes"]["model.test.cheap"]
        assert cheap["metadata"]["type"] == "table"
        assert {c: v["type"] for c, v in cheap["columns"].items()} == {
            "id": "bigint",
            "name": "string",
        }
        assert cheap["stats"]["rows"]["value"] == 1
        seed = catalog["nodes"]["seed.test.fruit"]
        assert seed["stats"]["rows"]["value"] == 3
        assert seed["columns"]["price"]["type"] == "double"
        view = catalog["nodes"]["model.test.all_names"]
        assert view["metadata"]["type"] == "view" and "rows" not in view["stats"]


class TestDebug:
    def test_dbt_debug_connects(self, project):
        _, log = run_dbt_and_capture(["debug"])
        assert "OK connection ok" in log and "All checks passed" in log


class TestAnUnreachableServer:
    @pytest.fixture(scope="class")
    def dbt_profile_target(self):
        return {"type": "changelake", "server": "http://127.0.0.1:9", "threads": 1}

    def test_says_where_it_looked_and_what_to_do(
        self, project_root, profiles_root, profiles_yml, dbt_project_yml
    ):
        # (not dbt's `project` fixture: it would make the test schema through the server)
        _, log = run_dbt_and_capture(
            ["debug", "--project-dir", str(project_root), "--profiles-dir", str(profiles_root)],
            expect_pass=False,
        )
        assert "http://127.0.0.1:9 did not answer" in log
        assert "changelake serve" in log and "Traceback" not in log
