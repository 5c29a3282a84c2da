"""What a statement costs that does not depend on load: py4j round trips (Python's calls into the
JVM, not counting py4j's deletes of Python's references, which garbage collection sends when it
likes), Spark jobs, and the catalog's queries (SELECT, INSERT, UPDATE, DELETE: not the BEGIN of
each transaction, nor what SQLAlchemy runs when its pool opens a connection)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import event

import changelake

# py4j's command that deletes a JVM reference (protocol: MEMORY_COMMAND_NAME, MEMORY_DEL_...).
_DELETE = "m\nd\n"


@dataclass
class Costs:
    py4j: int = 0
    jobs: int = 0
    catalog: int = 0

    def __str__(self) -> str:
        return f"{self.py4j} py4j calls, {self.jobs} Spark jobs, {self.catalog} catalog queries"


@contextmanager
def counted(session: changelake.Session) -> Iterator[Costs]:
    """The costs of what runs in the block (this process's py4j calls, the jobs this thread
    runs, the session catalog's statements); filled in when the block ends."""
    costs = Costs()
    spark = session.spark
    client = type(spark.sparkContext._gateway._gateway_client)
    send = client.send_command

    def counting(self, command, *args, **kwargs):
        if not command.startswith(_DELETE):
            costs.py4j += 1
        return send(self, command, *args, **kwargs)

    def executed(_conn, _cursor, statement: str, *_args) -> None:
        # reads and writes of the catalog's tables, not transaction control (BEGIN, PRAGMA)
        if statement.lstrip()[:6].upper() in ("SELECT", "INSERT", "UPDATE", "DELETE"):
            costs.catalog += 1

    engine = session.catalog.engine
    sc = spark.sparkContext
    tag = f"changelake-costs-{uuid.uuid4().hex}"
    sc.addJobTag(tag)
    event.listen(engine, "before_cursor_execute", executed)
    client.send_command = counting
    try:
        yield costs
    finally:
        client.send_command = send
        event.remove(engine, "before_cursor_execute", executed)
        sc.removeJobTag(tag)
        sc._jsc.sc().listenerBus().waitUntilEmpty()
        costs.jobs = len(sc._jsc.sc().statusTracker().getJobIdsForTag(tag))


def cost_of(session: changelake.Session, action: Callable[[], object]) -> Costs:
    with counted(session) as costs:
        action()
    return costs


def least(a: Costs, b: Costs) -> Costs:
    """Each cost's smaller figure."""
    return Costs(min(a.py4j, b.py4j), min(a.jobs, b.jobs), min(a.catalog, b.catalog))
