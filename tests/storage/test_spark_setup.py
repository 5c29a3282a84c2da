"""Starting changelake's own Spark: the driver's JVM options of a user's spark-defaults.conf
survive changelake's (a real process starts a real JVM and prints what it got)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from changelake.spark.setup import JVM_OPTIONS

_SCRIPT = """
import json
from changelake.spark.setup import default_spark
spark = default_spark()
system = spark.sparkContext._jvm.java.lang.System
print(json.dumps({k: system.getProperty("changelake.test." + k) for k in ("admin", "user", "ours")}))
spark.stop()
"""


def test_the_users_driver_options_survive_changelakes(tmp_path):
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(
        "# an administrator's options, then a user's\n"
        "spark.driver.defaultJavaOptions   -Dchangelake.test.admin=kept\n"
        "spark.driver.extraJavaOptions=-Dchangelake.test.user=kept\n"
    )
    env = {
        **os.environ,
        "SPARK_CONF_DIR": str(conf),
        JVM_OPTIONS: "-Dchangelake.test.ours=kept -XX:TieredStopAtLevel=1",
        "CHANGELAKE_SPARK_MASTER": "local[1]",
    }
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"admin": "kept", "user": "kept", "ours": "kept"}
