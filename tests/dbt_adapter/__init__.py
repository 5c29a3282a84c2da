"""dbt on changelake (a package: its conftest must not take the name of tests/conftest)."""
