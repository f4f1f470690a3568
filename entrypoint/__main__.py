"""``python -m entrypoint`` and the ``trainbox`` command.

``status`` is answered before click, yaml or huggingface_hub load: it must answer fast, and
from a bare ``python3`` with a checkout on a copy of the volume.
"""

import sys


def main() -> None:
    if sys.argv[1:2] == ["status"]:
        from entrypoint.state.view import main as status

        sys.exit(status(sys.argv[2:]))
    from entrypoint.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
