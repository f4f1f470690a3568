"""Build-time self-test: the image must hold exactly the torch build it was asked for.

Fails the build (exit 1, one line) when torch's version or CUDA build differs from the
build args, or when OpenCV, libreyolo or trainbox do not import.
"""

import os
import sys

import torch

want_torch, want_cuda = os.environ["TORCH_VERSION"], os.environ["TORCH_CUDA"]
base_version = torch.__version__.split("+")[0]
cuda = torch.version.cuda or "cpu"
if base_version != want_torch or cuda != want_cuda:
    sys.exit(
        f"selftest: torch {torch.__version__} (CUDA {cuda}) is installed, but the build asked "
        f"for torch {want_torch} with CUDA {want_cuda}: set TORCH_INDEX_URL to the index of "
        "that build and TORCH_CUDA to its CUDA version"
    )

import cv2  # noqa: E402  OpenCV's headless build, in place of the one libreyolo asks for
import libreyolo  # noqa: E402

import entrypoint  # noqa: E402

print(
    f"selftest: torch {torch.__version__} (CUDA {cuda}), OpenCV {cv2.__version__}, "
    f"libreyolo {libreyolo.__version__}, "
    f"trainbox {entrypoint.__version__}: ok"
)
