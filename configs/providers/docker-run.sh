#!/bin/sh
# The plain `docker run` of trainbox: every GPU, shared memory for the dataloaders, a volume
# on /workspace, time for the final upload on `docker stop`, the dashboard on loopback only.
# Settings come from .env (see .env.example); HF_TOKEN from this shell.
exec docker run --gpus all --shm-size 16g -v trainbox:/workspace --stop-timeout 120 \
  -p 127.0.0.1:8420:8420 --env-file .env -e HF_TOKEN \
  ghcr.io/OWNER/trainbox:0.1.0-cu126
