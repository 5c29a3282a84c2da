"""``view_groupby`` with every group spread over every file (see there)."""

from __future__ import annotations

from bench import view_groupby
from bench.harness import Context, Result

NAME = "view_groupby_spread"


def run(ctx: Context) -> Result:
    return view_groupby.measure(ctx, spread=True)
