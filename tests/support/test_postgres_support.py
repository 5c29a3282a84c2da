"""The throwaway PostgreSQL server used by the catalog tests really starts and answers queries."""

from __future__ import annotations

import sqlalchemy as sa

from .postgres import create_database, running_postgres


def _scalar(url: str, query: str) -> object:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as connection:
            return connection.execute(sa.text(query)).scalar_one()
    finally:
        engine.dispose()


def test_running_postgres_answers_select_1() -> None:
    with running_postgres() as url:
        assert url.startswith("postgresql+psycopg://postgres@127.0.0.1:")
        assert url.endswith("/changelake")
        assert _scalar(url, "SELECT 1") == 1


def test_create_database_gives_an_independent_database() -> None:
    with running_postgres() as url:
        other = create_database(url, "test_other")
        assert sa.make_url(other).database == "test_other"
        assert _scalar(other, "SELECT current_database()") == "test_other"
        engine = sa.create_engine(other)
        try:
            with engine.begin() as connection:
                connection.execute(sa.text("CREATE TABLE t (x INT)"))
        finally:
            engine.dispose()
        assert _scalar(url, "SELECT count(*) FROM pg_tables WHERE tablename = 't'") == 0
