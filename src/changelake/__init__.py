"""changelake: tables on a data lake that know their own changes, on Apache Spark.

>>> import changelake
>>> s = changelake.connect("./wh")                       # doctest: +SKIP
>>> s.sql("CREATE TABLE people (id INT, name STRING)")   # doctest: +SKIP
"""

from changelake.clock import Clock, ManualClock, SystemClock
from changelake.errors import ChangelakeError
from changelake.session import Session, connect

__all__ = ["ChangelakeError", "Clock", "ManualClock", "Session", "SystemClock", "connect"]
__version__ = "0.1.0"
