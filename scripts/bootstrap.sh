#!/usr/bin/env bash
# Prepare a development environment for changelake; safe to run any number of times.
#
# - creates .venv (python3 -m venv) when missing;
# - installs changelake editable with its test extras, and the dbt adapter (dbt-changelake/, with
#   dbt-core and dbt's adapter tests, pinned there), skipped when both pyproject.toml files are
#   unchanged since the last install (a hash stamp lives in .venv);
# - checks for Java 17+ (Spark needs it);
# - makes sure the PostgreSQL server binaries exist (the PostgreSQL catalog tests start a real server);
# - builds the class archive that shortens the start of a local Spark (once per user and setup).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"

venv="$repo/.venv"
stamp="$venv/.changelake-install-stamp"

if [[ ! -x "$venv/bin/python" ]]; then
    echo "bootstrap: creating $venv" >&2
    python3 -m venv "$venv"
fi

wanted_hash="$(cat pyproject.toml dbt-changelake/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$wanted_hash" ]] \
    || ! "$venv/bin/python" -c 'import importlib.metadata as m; m.version("changelake"); m.version("dbt-changelake")' \
        >/dev/null 2>&1; then
    echo "bootstrap: installing changelake and its test dependencies into $venv" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
    # compat mode puts dbt-changelake/src on the path, where dbt's namespace packages
    # (dbt.adapters, dbt.include) find the adapter beside dbt-core's own
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --config-settings editable_mode=compat -e './dbt-changelake[test]'
    echo "$wanted_hash" >"$stamp"
fi

# `java -version` prints e.g. `openjdk version "17.0.15"` or `java version "1.8.0_392"` on stderr.
java_major() {
    local line version
    line="$(java -version 2>&1 | grep -m1 -i 'version' || true)"
    version="$(sed -E 's/.*version "([^"]+)".*/\1/' <<<"$line")"
    if [[ "$version" == 1.* ]]; then
        cut -d. -f2 <<<"$version"
    else
        cut -d. -f1 <<<"$version" | grep -oE '^[0-9]+' || true
    fi
}

if ! command -v java >/dev/null 2>&1; then
    echo "bootstrap: Java 17 or newer is required and was not found; install it with:" \
        "apt-get install -y openjdk-17-jre-headless" >&2
    exit 1
fi
major="$(java_major)"
if [[ -z "$major" || "$major" -lt 17 ]]; then
    echo "bootstrap: Java 17 or newer is required but found '${major:-unknown}'; install it with:" \
        "apt-get install -y openjdk-17-jre-headless" >&2
    exit 1
fi

# javac compiles changelake's Spark expressions (src/changelake/spark/jvm) on first use; without
# it reads of deletion vectors fall back to slower joins.
if ! command -v javac >/dev/null 2>&1; then
    if [[ "$(id -u)" -eq 0 ]]; then
        echo "bootstrap: installing a Java compiler (changelake builds its Spark expressions)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless >/dev/null
    else
        echo "bootstrap: javac is missing, so changelake reads deletion vectors with slower joins;" \
            "install it with: sudo apt-get install -y openjdk-17-jdk-headless" >&2
    fi
fi

if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    if [[ "$(id -u)" -eq 0 ]]; then
        echo "bootstrap: installing the PostgreSQL server (needed by the PostgreSQL catalog tests)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
        echo "bootstrap: the PostgreSQL server is missing, so PostgreSQL catalog tests will fail;" \
            "install it with: sudo apt-get install -y postgresql" >&2
    fi
fi

# External tables read PostgreSQL through Spark's JDBC source with Debian's driver.
if [[ ! -f /usr/share/java/postgresql.jar ]]; then
    if [[ "$(id -u)" -eq 0 ]]; then
        echo "bootstrap: installing the PostgreSQL JDBC driver (external tables read through it)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpostgresql-jdbc-java >/dev/null
    else
        echo "bootstrap: the PostgreSQL JDBC driver is missing, so external tables cannot load;" \
            "install it with: sudo apt-get install -y libpostgresql-jdbc-java" >&2
    fi
fi

# The dashboard draws the pipeline with Graphviz; its tests load the pages in headless Chromium.
if ! command -v dot >/dev/null || ! command -v chromedriver >/dev/null; then
    if [[ "$(id -u)" -eq 0 ]]; then
        echo "bootstrap: installing Graphviz and headless Chromium (the dashboard and its tests)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz chromium chromium-driver \
            >/dev/null
    else
        echo "bootstrap: Graphviz or Chromium is missing (the dashboard's graph, its browser" \
            "tests); install them with: sudo apt-get install -y graphviz chromium chromium-driver" >&2
    fi
fi

# A minute and a half once; every local Spark started later (the CLI, serve, the tests' worker
# processes) maps it and starts a third faster (src/changelake/spark/class_archive.py).
if [[ "$("$venv/bin/python" -c 'from changelake.spark.class_archive import archive_path as a; print(a().exists())')" != True ]]; then
    echo "bootstrap: building the class archive of Spark (once, about a minute and a half)" >&2
    "$venv/bin/python" -c 'from changelake.spark.class_archive import build; build()' \
        || echo "bootstrap: the class archive could not be built; Spark starts without it" >&2
fi
