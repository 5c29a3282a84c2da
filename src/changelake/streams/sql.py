"""Statements about STREAM objects (CREATE / DROP / SHOW / DESCRIBE STREAM)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from changelake.session import Session


def stream_command(session: Session, text: str) -> DataFrame | None:
    """Run ``text`` if it is a stream statement; None otherwise."""
    return None
