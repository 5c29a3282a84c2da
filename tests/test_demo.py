"""The demo runs start to finish and prints the README example's results."""

from __future__ import annotations

from changelake import demo


def test_demo_runs_in_a_fresh_warehouse(spark, tmp_path, capsys):
    warehouse = tmp_path / "demo-warehouse"
    (warehouse / "data").mkdir(parents=True)
    (warehouse / "data" / "stale.parquet").write_text("left over from an earlier run")
    assert demo.main([str(warehouse)]) == 0
    out = capsys.readouterr().out
    assert not (warehouse / "data" / "stale.parquet").exists()
    assert "Jeffrey" in out and "Walter" in out
    assert "DESCRIBE HISTORY people" in out
    for operation in ("CREATE TABLE", "INSERT", "UPDATE", "DELETE"):
        assert operation in out
    assert "METADATA$ROW_ID" in out and "shape MINIMIZE" in out
    assert "Bunny" in out and "Maude" in out  # the stream delivered the later changes
    assert "error" not in out.lower()
    # the pipeline: rows through a channel, dynamic tables refreshed, the task's alert
    assert "committed through offset token 3" in out
    assert "│ south  │ 3      │ 295.0   │" in out  # revenue after the update, incrementally
    assert "INCREMENTAL refresh of revenue" in out
    assert "│ 4        │ 250.0  │" in out  # the triggered task's row
    assert "changelake serve" in out
