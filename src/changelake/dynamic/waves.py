"""Running the refreshes of a round, each after the ones it reads: one after another, or the
independent ones at once on a pool of threads (``changelake serve``'s scheduler, whose threads
run their Spark jobs in FAIR scheduler pools of their own)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait


def in_waves(
    items: Sequence[int],
    *,
    after: Callable[[int], Collection[int]],
    run: Callable[[int], None],
    workers: Executor | None,
) -> None:
    """``run`` each of ``items`` (in an order where each comes after the ``after`` it depends
    on) once every one of its ``after`` among ``items`` has run: on ``workers`` as soon as it
    may, several at once, or without them one after another in order. An error of ``run`` is
    raised once the runs started have ended (no other starts).

    >>> from concurrent.futures import ThreadPoolExecutor
    >>> reads = {3: [1], 4: [3, 2]}  # 3 reads 1; 4 reads 3 and 2
    >>> done = []
    >>> with ThreadPoolExecutor(2) as pool:
    ...     in_waves([1, 2, 3, 4], after=lambda i: reads.get(i, []), run=done.append, workers=pool)
    >>> done.index(3) > done.index(1) and done.index(4) > max(done.index(3), done.index(2))
    True
    """
    if workers is None:
        for item in items:
            run(item)
        return
    pending = list(items)
    among = set(items)
    finished: set[int] = set()
    running: dict[Future[None], int] = {}
    error: BaseException | None = None
    while running or (pending and error is None):
        if error is None:
            ready = [i for i in pending if all(a in finished or a not in among for a in after(i))]
            for item in ready:
                pending.remove(item)
                running[workers.submit(run, item)] = item
        ended, _ = wait(running, return_when=FIRST_COMPLETED)
        for future in ended:
            finished.add(running.pop(future))
            error = error or future.exception()
    if error is not None:
        raise error
