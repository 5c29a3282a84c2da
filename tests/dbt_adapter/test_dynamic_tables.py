"""``materialized='dynamic_table'`` (modelled on dbt-snowflake's dynamic table tests): created on
the first run, left alone when unchanged (no refresh forced), ALTERed when its lag or refresh mode
changed, replaced when its query changed, per on_configuration_change; a DAG of them kept fresh by
the scheduler of the ``changelake serve`` the server mode runs against."""

from __future__ import annotations

import time

import pytest
from dbt.tests.util import get_manifest, run_dbt, run_dbt_and_capture, write_file

SEED = "id,customer,amount\n1,ann,10\n2,bob,20\n3,ann,5\n"

TOTALS = """
{{{{ config(materialized='dynamic_table', target_lag='{lag}', refresh_mode='{mode}'{extra}) }}}}
select customer, sum(amount) as total from {{{{ ref('orders') }}}} group by customer
"""

BIG = """
{{ config(materialized='dynamic_table', target_lag='downstream') }}
select customer, total from {{ ref('totals') }} where total > 12
"""


def totals(lag: str = "1 minute", mode: str = "INCREMENTAL", extra: str = "") -> str:
    return TOTALS.format(lag=lag, mode=mode, extra=extra)


def state(project, name: str) -> dict:
    """The dynamic table's row of SHOW DYNAMIC TABLES."""
    stored = f"{project.test_schema}__{name}".lower()
    found = project.run_sql("SHOW DYNAMIC TABLES", fetch="all")
    columns = ("name", "target_lag", "refresh_mode")
    for row in found:
        if row[0] == stored:
            return dict(zip(columns, row[:3], strict=True)) | {"text": row[-1], "rows": row[-2]}
    raise AssertionError(f"{stored} is not a dynamic table: {[r[0] for r in found]}")


def refreshes(project, name: str) -> int:
    stored = f"{project.test_schema}__{name}".lower()
    history = project.run_sql(
        f"SELECT * FROM TABLE(DYNAMIC_TABLE_REFRESH_HISTORY(NAME => '{stored}'))", fetch="all"
    )
    return len(history)


def rows_of(project, name: str) -> list[tuple]:
    return sorted(
        tuple(r)
        for r in project.run_sql(f"SELECT * FROM {project.test_schema}.{name}", fetch="all")
    )


@pytest.mark.usefixtures("fresh_models")
class Pipeline:
    """A project of a seed and two dynamic tables, one reading the other (one per test class:
    each scenario changes the models)."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": SEED}

    @pytest.fixture(scope="class")
    def models(self):
        return {"totals.sql": totals(), "big.sql": BIG}


class TestDynamicTable(Pipeline):
    def test_lifecycle(self, project):
        run_dbt(["seed"])
        results = run_dbt(["run"])
        assert len(results) == 2
        assert state(project, "totals") == {
            "name": f"{project.test_schema}__totals".lower(),
            "target_lag": "1 minute",
            "refresh_mode": "INCREMENTAL",
            "text": state(project, "totals")["text"],
            "rows": 2,
        }
        assert rows_of(project, "totals") == [("ann", 15), ("bob", 20)]
        assert rows_of(project, "big") == [("ann", 15), ("bob", 20)]
        assert state(project, "big")["target_lag"] == "DOWNSTREAM"
        manifest = get_manifest(project.project_root)
        assert manifest.nodes["model.test.big"].depends_on.nodes == ["model.test.totals"]

        # unchanged: left as it is, no refresh forced
        before = refreshes(project, "totals")
        run_dbt(["run", "-s", "totals"])
        assert refreshes(project, "totals") == before

        # a changed lag or refresh mode is applied with ALTER: same table, no refresh
        write_file(
            totals(lag="2 minutes", mode="FULL"), project.project_root, "models", "totals.sql"
        )
        run_dbt(["run", "-s", "totals"])
        assert state(project, "totals")["target_lag"] == "2 minutes"
        assert state(project, "totals")["refresh_mode"] == "FULL"
        assert refreshes(project, "totals") == before

        # lags written another way but equal are no change
        write_file(
            totals(lag="120 seconds", mode="full"), project.project_root, "models", "totals.sql"
        )
        _, log = run_dbt_and_capture(["--debug", "run", "-s", "totals"])
        assert "alter dynamic table" not in log.lower()

        # a changed query replaces it
        write_file(
            BIG.replace("total > 12", "total > 16"), project.project_root, "models", "big.sql"
        )
        run_dbt(["run", "-s", "big"])
        assert rows_of(project, "big") == [("bob", 20)]
        assert "total > 16" in state(project, "big")["text"]

        # ... unless other dynamic tables read it: changelake says which
        changed = totals(lag="2 minutes", mode="FULL").replace("sum(amount)", "10 * sum(amount)")
        write_file(changed, project.project_root, "models", "totals.sql")
        _, log = run_dbt_and_capture(["run", "-s", "totals"], expect_pass=False)
        assert "dynamic table(s)" in log and "__big read it" in log
        assert rows_of(project, "totals") == [("ann", 15), ("bob", 20)]


class TestOnConfigurationChange(Pipeline):
    def test_on_configuration_change(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        write_file(
            totals(lag="5 minutes", extra=", on_configuration_change='continue'"),
            project.project_root,
            "models",
            "totals.sql",
        )
        _, log = run_dbt_and_capture(["run", "-s", "totals"])
        assert "on_configuration_change is continue" in log
        assert state(project, "totals")["target_lag"] != "5 minutes"

        write_file(
            totals(lag="5 minutes", extra=", on_configuration_change='fail'"),
            project.project_root,
            "models",
            "totals.sql",
        )
        _, log = run_dbt_and_capture(["run", "-s", "totals"], expect_pass=False)
        assert "on_configuration_change is fail" in log
        assert state(project, "totals")["target_lag"] != "5 minutes"

        write_file(totals(lag="5 minutes"), project.project_root, "models", "totals.sql")
        run_dbt(["run", "-s", "totals"])
        assert state(project, "totals")["target_lag"] == "5 minutes"


class TestALagIsRequired(Pipeline):
    def test_a_lag_is_required(self, project):
        write_file(
            "{{ config(materialized='dynamic_table') }} select 1 as id",
            project.project_root,
            "models",
            "nolag.sql",
        )
        _, log = run_dbt_and_capture(["run", "-s", "nolag"], expect_pass=False)
        assert "needs target_lag" in log


class TestTheSchedulerKeepsADagFresh:
    """Through the server: after `dbt run`, the service's scheduler refreshes the DAG."""

    @pytest.fixture(scope="class")
    def seeds(self):
        return {"orders.csv": SEED}

    @pytest.fixture(scope="class")
    def models(self):
        big = BIG.replace("target_lag='downstream'", "target_lag='2 seconds'")
        return {"totals.sql": totals(lag="2 seconds"), "big.sql": big}

    @pytest.fixture(scope="class")
    def dbt_profile_target(self, server_profile):
        return server_profile

    def test_fresh(self, project):
        run_dbt(["seed"])
        run_dbt(["run"])
        project.run_sql(f"INSERT INTO {project.test_schema}.orders VALUES (4, 'cy', 30)")
        deadline = time.monotonic() + 60
        while rows_of(project, "big") != [("ann", 15), ("bob", 20), ("cy", 30)]:
            assert time.monotonic() < deadline, rows_of(project, "big")
            time.sleep(0.5)
