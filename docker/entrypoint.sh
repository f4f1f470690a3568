#!/bin/sh
# The image's entrypoint, started by tini, the way the official Docker images' entrypoints
# work: a trainbox subcommand or an option goes to `trainbox` (`docker run IMAGE`, `... IMAGE
# status`, `... IMAGE --help`); anything else runs as it is (`... IMAGE bash`, `... IMAGE
# python -c ...`, `... IMAGE trainbox status`). tests/test_entrypoint.py keeps the list below
# equal to the trainbox command's own subcommands.
set -e
[ "$#" -gt 0 ] || set -- run
case "$1" in
  -*|card|check|config|dataset|elastic|evaluate|launch|monitor|notify|plan|run|status|train|upload|watchdog)
    exec trainbox "$@" ;;
esac
exec "$@"
