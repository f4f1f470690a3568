"""``python -m entrypoint`` is the ``trainbox`` command."""

from .cli import main

main()
