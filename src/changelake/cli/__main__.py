"""``python -m changelake.cli``: the ``changelake`` command."""

from changelake.cli import main

main()
