#!/usr/bin/env bash
# The GPU checks of #4, #8 and #17 on a borrowed GPU machine, as one prepared command.
#
# That machine has a python3 with torch and nothing of ours; it cannot reach any network.
# What trainbox needs beyond torch travels as wheels in .whl/ (cp312, downloaded here as
# /work/.library/device/README.md says), installed into /tmp/site. Every result lands in $OUT.
#
#   1. tests/gpu/acceptance.py with the machine's bare python3 (libreyolo absent: skipped)
#   2. the same with libreyolo importable: one LibreYOLO9t epoch on the card
#   3. `trainbox check --json` (DEVICE=auto): the preflight of every run, on the real card
#   4. `trainbox run` of the built-in demo with DEVICE=0: supervisord, the train program,
#      the watchdog, status files, through the same code path as the container
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=${WHEELS:-$ROOT/.whl}
export PYTHONUNBUFFERED=1
cd "$ROOT"

{ date -u; nvidia-smi; python3 -c 'import sys, torch; print(sys.version, torch.__version__)'; } \
    >"$OUT/machine.txt" 2>&1

echo "== 1. acceptance, bare python3"
timeout 180 python3 tests/gpu/acceptance.py --out "$OUT/acceptance-bare.json" --no-libreyolo
echo "rc=$?"

# A venv of our own, so that sys.executable has supervisord beside it (supervise.py looks
# there); the machine's torch comes in through PYTHONPATH, after our wheels.
SITE=$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    "$WHEELS"/*.whl || exit 3
python3 -m venv --without-pip /tmp/venv || exit 3
ln -sf /tmp/site/bin/* /tmp/venv/bin/
export PYTHONPATH=$ROOT:/tmp/site:$SITE
PY=/tmp/venv/bin/python3
export PATH=/tmp/venv/bin:$PATH

echo "== 2. acceptance, libreyolo importable"
timeout 240 $PY tests/gpu/acceptance.py --out "$OUT/acceptance.json" >"$OUT/acceptance.log" 2>&1
echo "rc=$?"
grep -E '^(preflight|loop|libreyolo|acceptance):' "$OUT/acceptance.log"

echo "== 3. trainbox check --json"
export WORKSPACE=/tmp/ws MONITOR=false
DEVICE=auto timeout 120 $PY -m entrypoint check --json >"$OUT/check.json" 2>"$OUT/check.log"
echo "rc=$?"
tail -n 3 "$OUT/check.log"

echo "== 4. trainbox run, demo, DEVICE=0"
start=$(date +%s)
DEVICE=0 timeout 300 $PY -m entrypoint run >"$OUT/run.log" 2>&1
echo "rc=$? in $(($(date +%s) - start)) s"
grep -E 'epoch [0-9]+/|preflight|GPU|training completed|error|Error' "$OUT/run.log" | head -n 20
cp /tmp/ws/trainbox/status.json "$OUT/status.json" 2>/dev/null
cp /tmp/ws/trainbox/preflight.json "$OUT/preflight.json" 2>/dev/null
ls /tmp/ws/runs/run/weights

# 5. #53's GPU waiting, in dollars: the same demo with the loader in the trainer (WORKERS=0,
#    a starved card) and with WORKERS=auto; the status's gpu_use per epoch and the one line
#    that says the waiting, for docs/development.md. (Prepared 2026-12-06; not yet run on a card.)
echo "== 5. the GPU's waiting: WORKERS=0, then auto"
for w in 0 auto; do
  DEVICE=0 WORKERS=$w EPOCHS=12 IMGSZ=640 PRICE_PER_HOUR=2.49 RUN_NAME="wait-$w" \
    timeout 240 $PY -m entrypoint run >"$OUT/wait-$w.log" 2>&1
  echo "WORKERS=$w rc=$?"
  grep -E 'the GPUs were busy|preflight: /dev/shm' "$OUT/wait-$w.log"
  cp /tmp/ws/trainbox/status.json "$OUT/status-wait-$w.json" 2>/dev/null
done
