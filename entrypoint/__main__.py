"""``python -m entrypoint`` and the ``trainbox`` command.

``status`` is answered before click, yaml or huggingface_hub load: it must answer fast, and
from a bare ``python3`` with a checkout on a copy of the volume.
"""

import sys

# The processes that grow: the kernel's first choice when the container's memory runs out, from
# their first instruction on (set later, after torch's import, a trainer starting under a 600 MB
# limit grew past the job first, and the kernel killed the job: exit 137, no line).
EXPENDABLE = ("train", "launch", "elastic", "check", "evaluate")
# Then those supervisord starts again and that lose nothing by a kill (limits.expendable says why).
RESTARTABLE = ("upload", "monitor")


def main() -> None:
    if sys.argv[1:2] == ["status"]:
        from entrypoint.state.view import main as status

        sys.exit(status(sys.argv[2:]))
    if sys.argv[1:2] and sys.argv[1] in EXPENDABLE + RESTARTABLE:
        from entrypoint.preflight import limits  # the standard library's alone

        limits.expendable(limits.GROWS if sys.argv[1] in EXPENDABLE else limits.RESTARTS)
    from entrypoint.cli import main as cli

    cli()


if __name__ == "__main__":
    main()
