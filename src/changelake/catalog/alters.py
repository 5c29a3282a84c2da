"""Updates that set properties of a dynamic table, a task, a task run or an external table: one
typed field per settable property (``UNSET``: left as it is), each checked when the update is
built, so that no untyped bag of column names reaches the catalog. Its repository writes an
update by an explicit map from each field to its column (``dynamic_repo.alter``,
``task_repo.alter``, ``task_repo.finish_run``, ``external_repo.alter``), less what is UNSET
(``values_set``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from changelake.catalog.model import (
    ExternalTableState,
    RefreshMode,
    SchedulingState,
    TaskDefinition,
    TaskRunState,
    TaskState,
)


class Unset(Enum):
    """The value of a field an ``Alter…`` update leaves as it is."""

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset.UNSET
K = TypeVar("K")


def values_set(values: Mapping[K, object]) -> dict[K, object]:
    """``values`` (a column, or a field's name -> an update's value) without the UNSET ones."""
    return {k: v for k, v in values.items() if v is not UNSET}


def fields_set(update: object) -> dict[str, object]:
    """The fields an ``Alter…`` update sets (those not UNSET), by name; its first field, the
    object's id, left out."""
    named = dataclasses.fields(update)  # type: ignore[arg-type]
    return values_set({f.name: getattr(update, f.name) for f in named[1:]})


def _check(update: object, **rules: Callable[[Any], bool]) -> None:
    """Refuse an update that sets nothing, or sets a field to a value its rule refuses."""
    found = fields_set(update)
    name = type(update).__name__
    if not found:
        raise ValueError(f"{name} sets nothing")
    for field_name, ok in rules.items():
        if field_name in found and not ok(found[field_name]):
            raise ValueError(f"{name}: {field_name} = {found[field_name]!r} is not allowed")


def _one_of(allowed: Iterable[str]) -> Callable[[Any], bool]:
    """A rule: the value is one of ``allowed`` (an enum's members, or some of them)."""
    values = tuple(allowed)
    return lambda value: value in values


def _count(value: Any) -> bool:
    return isinstance(value, int) and value >= 0


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and value > 0


def _text(value: Any) -> bool:
    return isinstance(value, str)


def _text_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


@dataclass(frozen=True)
class AlterDynamicTable:
    """Set properties of a dynamic table's definition or scheduling state (ALTER DYNAMIC TABLE,
    a suspension after failures, a refresh of a changed definition); UNSET: left as it is."""

    table_id: int
    fingerprint: str | Unset = UNSET
    target_lag: float | None | Unset = UNSET  # seconds; None: DOWNSTREAM
    refresh_mode: RefreshMode | Unset = UNSET
    effective_mode: RefreshMode | Unset = UNSET  # FULL | INCREMENTAL
    mode_reason: str | Unset = UNSET
    scheduling_state: SchedulingState | Unset = UNSET
    suspended_reason: str | Unset = UNSET
    failures: int | Unset = UNSET

    def __post_init__(self) -> None:
        _check(
            self,
            fingerprint=_text,
            target_lag=lambda v: v is None or _seconds(v),
            refresh_mode=_one_of(RefreshMode),
            effective_mode=_one_of((RefreshMode.FULL, RefreshMode.INCREMENTAL)),
            mode_reason=_text,
            scheduling_state=_one_of(SchedulingState),
            suspended_reason=_text,
            failures=_count,
        )

    @staticmethod
    def suspending(
        table_id: int, reason: str, *, failures: int | Unset = UNSET
    ) -> AlterDynamicTable:
        """Its scheduled refreshes stop, for ``reason`` (shown by SHOW DYNAMIC TABLES)."""
        return AlterDynamicTable(
            table_id,
            scheduling_state=SchedulingState.SUSPENDED,
            suspended_reason=reason,
            failures=failures,
        )

    @staticmethod
    def resuming(table_id: int) -> AlterDynamicTable:
        """Its scheduled refreshes start again, its failures in a row forgiven."""
        return AlterDynamicTable(
            table_id, scheduling_state=SchedulingState.ACTIVE, suspended_reason="", failures=0
        )


@dataclass(frozen=True)
class AlterTask:
    """Set properties of a task (its definition, state, next run, failures); a new definition's
    AFTER is checked for cycles as at CREATE. UNSET: left as it is."""

    task_id: int
    definition: TaskDefinition | Unset = UNSET
    state: TaskState | Unset = UNSET
    suspended_reason: str | Unset = UNSET
    failures: int | Unset = UNSET
    next_at: float | None | Unset = UNSET  # when it runs next; None: not scheduled

    def __post_init__(self) -> None:
        _check(
            self,
            definition=lambda v: isinstance(v, TaskDefinition),
            state=_one_of(TaskState),
            suspended_reason=_text,
            failures=_count,
            next_at=lambda v: v is None or isinstance(v, int | float),
        )


@dataclass(frozen=True)
class FinishTaskRun:
    """End an EXECUTING task run: in a commit, with that commit's time and number (what its
    statement wrote and its SUCCEEDED row commit together, once); or on its own, when it
    committed nothing (``Catalog.end_task_run``: FAILED, CANCELLED)."""

    run_id: int
    state: TaskRunState  # SUCCEEDED | FAILED | CANCELLED
    statement_id: str | Unset = UNSET  # the statement whose commit it was
    spark_jobs: int | Unset = UNSET
    reason: str | Unset = UNSET
    error: str | Unset = UNSET

    def __post_init__(self) -> None:
        _check(
            self,
            state=_one_of((TaskRunState.SUCCEEDED, TaskRunState.FAILED, TaskRunState.CANCELLED)),
            statement_id=_text,
            spark_jobs=_count,
            reason=_text,
            error=_text,
        )


@dataclass(frozen=True)
class AlterExternalTable:
    """Set properties of an external table: its scope, follow state, error, lag, source
    position; UNSET: left as it is."""

    table_id: int
    scope: str | None | Unset = UNSET  # SCOPE = DEPENDENTS: the OR of predicates; None: all
    state: ExternalTableState | Unset = UNSET
    error: str | None | Unset = UNSET
    follow_lag: float | Unset = UNSET  # seconds
    followed_at: float | Unset = UNSET
    position: str | None | Unset = UNSET  # where in the source the rows are: an LSN, a count
    bootstrap: str | None | Unset = UNSET  # a rescope in progress

    def __post_init__(self) -> None:
        _check(
            self,
            scope=_text_or_none,
            state=_one_of(ExternalTableState),
            error=_text_or_none,
            follow_lag=_seconds,
            followed_at=lambda v: isinstance(v, int | float),
            position=_text_or_none,
            bootstrap=_text_or_none,
        )
