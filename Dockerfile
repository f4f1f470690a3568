# trainbox: one CUDA-matched image that trains LibreYOLO on a rented GPU.
# It reads like the job: base, system packages, torch (the CUDA build), libreyolo, our code.
# Each step is its own layer, ordered from what changes least to what changes most; torch is
# installed in a stage of its own and comes into the image as five layers.

ARG BASE_IMAGE=debian:bookworm-slim
# The build args of every stage: torch's version and CUDA build, libreyolo's, and ours.
ARG TRAINBOX_VERSION=0.1.0
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
# The CUDA build torch must report (torch.version.cuda), or "cpu". It must match the index.
# The default, CUDA 12.6, runs on the most rented hosts (any driver >= 525, every card but
# Blackwell: docs/platforms.md, "Which image for which machine"). An empty TORCH_INDEX_URL
# takes torch from the same source as everything else: PyPI's 2.14.1 is the CUDA 13.0 build (Blackwell).
ARG TORCH_CUDA=12.6
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126

# System packages: Python 3.11, tini as PID 1 (reaps zombies, forwards signals), and sshd,
# which runs only when a public key is given (entrypoint/runtime/ssh.py). Its package makes
# host keys at install: they are removed, or every container of this image would share them; each box
# makes its own at first start, on its volume. No libgl1: OpenCV's headless build (below)
# needs no GUI libraries, and libgl1 alone brought ~200 MB (LLVM, Mesa, Z3).
# SkyPilot's docker initialization replaces the entrypoint with bash, apt-installs rsync curl
# wget patch openssh-server python3-pip fuse and runs `service ssh start` on port 10022
# (sky/provision/docker_utils.py, SkyPilot 0.14.1, read 2026-12-02). With them here its install
# is a no-op on the billed machine; and since Debian's init script makes no host keys (only
# the package's install does), /etc/default/ssh, which it sources, makes this container's own.
FROM ${BASE_IMAGE} AS system
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# (The backquotes below are text, a comment written into /etc/default/ssh.)
# hadolint ignore=SC2016
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3 python3-venv tini ca-certificates openssh-server \
      rsync curl wget patch python3-pip fuse \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /etc/ssh/ssh_host_* \
 && printf '%s\n' '# trainbox: host keys of its own for a container started by `service ssh start`' \
      '[ -e /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A' >> /etc/default/ssh

# Everything the image needs lives under /opt/trainbox, never under /workspace:
# a volume mounted there would hide it. The Hugging Face cache lives on the volume.
# The venv is made by python3.11 by name: its bin/python3 then links to /usr/bin/python3.11,
# not /usr/bin/python3, which a platform's build may point at an interpreter of its own (Beam
# installs one for its runner: tests/beam), so the venv and its pins stay this image's.
ENV VIRTUAL_ENV=/opt/trainbox/venv \
    PATH=/opt/trainbox/venv/bin:$PATH \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    HF_HOME=/workspace/.cache/huggingface
RUN /usr/bin/python3.11 -m venv "$VIRTUAL_ENV"

# 1. torch: the CUDA-matched part, installed in a stage of its own. What it installs is
#    frozen into a constraints file that every later pip call obeys, so nothing can swap
#    torch or its CUDA libraries. Then its ~5.8 GB are split, whole packages at a time, into
#    five layers of similar size (docker/torch_layers.py): Docker downloads several layers
#    at once and unpacks each as soon as it is whole, where one giant layer is one stream.
#    (Pinned through the build args above, which hadolint cannot see.)
FROM system AS torch
ARG TORCH_VERSION
ARG TORCHVISION_VERSION
ARG TORCH_INDEX_URL
# Where pip looks, in the stages that install (an ARG lasts one stage): PyPI unless told
# otherwise; an offline build from a wheelhouse sets PIP_FIND_LINKS and PIP_NO_INDEX=1.
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
COPY docker/torch_layers.py /tmp/torch_layers.py
# hadolint ignore=DL3013
RUN python /tmp/torch_layers.py snapshot "$VIRTUAL_ENV" /tmp/venv.json \
 && pip install ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} \
      "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \
 && pip freeze > /opt/trainbox/torch-constraints.txt \
 && python /tmp/torch_layers.py split "$VIRTUAL_ENV" /tmp/venv.json /layers 5 \
      /opt/trainbox/torch-constraints.txt

# The image: the system, then torch's five layers, then libreyolo, then trainbox.
FROM system
ARG TRAINBOX_VERSION
ARG TORCH_VERSION
ARG TORCH_CUDA
ARG LIBREYOLO_VERSION=1.6.0
# libreyolo's extras, pinned by the lock (docker/lock.py's EXTRAS): rfdetr (transformers, so
# that RF-DETR and DINOv2 exist), lora (peft) and onnx (onnxruntime: export_check, INT8 export).
# Others (tensorrt needs a matching CUDA, openvino, ...) are this build argument's to add, and
# unpinned; EXTRA_PACKAGES adds packages, e.g. "wandb".
ARG LIBREYOLO_EXTRAS="rfdetr,lora,onnx,plots"
ARG EXTRA_PACKAGES=""

LABEL org.opencontainers.image.title="trainbox" \
      org.opencontainers.image.description="Trains LibreYOLO on a rented GPU; weights leave every epoch" \
      org.opencontainers.image.version="${TRAINBOX_VERSION}" \
      org.opencontainers.image.licenses="MIT" \
      ai.trainbox.version="${TRAINBOX_VERSION}" \
      ai.trainbox.torch="${TORCH_VERSION}" \
      ai.trainbox.cuda="${TORCH_CUDA}" \
      ai.trainbox.libreyolo="${LIBREYOLO_VERSION}"

COPY --from=torch /layers/1/ /
COPY --from=torch /layers/2/ /
COPY --from=torch /layers/3/ /
COPY --from=torch /layers/4/ /
COPY --from=torch /layers/5/ /
# What the torch step deleted (the old files of a package it upgraded: torch needs a newer
# setuptools than the venv's), deleted here too: a COPY can add files, not remove them.
RUN xargs --delimiter='\n' --no-run-if-empty rm -rf -- < /opt/trainbox/torch-removed.txt

ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
# 2. libreyolo with its extras and the rest (huggingface_hub, hf_xet, supervisor, pyyaml, and
#    onnx for EXPORT=onnx), pinned by the lock. libreyolo asks for opencv-python (the GUI build: Qt,
#    and libGL from the system) and mss (a screen grabber it imports only to read a screen):
#    pip cannot leave out a dependency, so in the same step (they never reach the layer) both
#    are removed and OpenCV's headless build of the same version takes its place.
#    EXTRA_PACKAGES is a space-separated list, split on purpose.
COPY docker/requirements.lock docker/opencv-headless.txt /opt/trainbox/
# hadolint ignore=SC2086
RUN pip install --constraint /opt/trainbox/torch-constraints.txt \
      --requirement /opt/trainbox/requirements.lock \
      "libreyolo${LIBREYOLO_EXTRAS:+[$LIBREYOLO_EXTRAS]}==${LIBREYOLO_VERSION}" $EXTRA_PACKAGES \
 && pip uninstall --yes opencv-python mss \
 && pip install --no-deps --requirement /opt/trainbox/opencv-headless.txt

# 3. trainbox itself, last: a code change rebuilds only this small layer. The build
#    ends with a self-test that fails it unless torch is exactly the build asked for.
#    Then LibreYOLO's name table (entrypoint/settings/family.py): a start looks MODEL up
#    without importing every family (5-9 s a start).
#    The command is also on the system's PATH: a login shell (SkyPilot runs every command,
#    and its job, in one) starts from /etc/profile's PATH, which lacks the venv's.
COPY pyproject.toml /opt/trainbox/src/
COPY configs /opt/trainbox/src/configs
COPY docker /opt/trainbox/src/docker
COPY entrypoint /opt/trainbox/src/entrypoint
RUN pip install --no-deps --no-build-isolation --editable /opt/trainbox/src \
 && ln -s "$VIRTUAL_ENV/bin/trainbox" /usr/local/bin/trainbox \
 && python /opt/trainbox/src/docker/selftest.py \
 && python -m entrypoint.settings.family

# Healthy while the run makes progress; unhealthy once it failed or made none for half of
# STALL_TIMEOUT (the watchdog ends it at the whole). Reads the status file: milliseconds.
HEALTHCHECK --interval=30s --timeout=10s --start-period=2m --retries=2 \
  CMD ["trainbox", "status", "--health"]
# The `libreyolo monitor` dashboard (MONITOR_PORT); compose publishes it on 127.0.0.1 only.
EXPOSE 8420
WORKDIR /workspace
# A trainbox subcommand goes to trainbox, anything else (bash, python) runs as it is.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/trainbox/src/docker/entrypoint.sh"]
CMD ["run"]
