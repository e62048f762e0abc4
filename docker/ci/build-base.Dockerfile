# Stand-in for docker/Dockerfile's BUILD_IMAGE (pytorch/pytorch:2.11.0-cuda13.0-cudnn9-devel),
# for docker/ci/image_test.sh on machines that cannot pull it (CI here reaches no container
# registry). It provides what the build stage expects of the PyTorch image, and nothing that
# the build stage should install itself:
#   - Python at /opt/conda/bin/python with torch (requirements.txt's pin) and numpy, and
#     /opt/conda/bin first on PATH, as the PyTorch image has them (its conda environment);
#   - apt-get and a C++ compiler (the CUDA devel base brings one; scripts/env.sh installs the
#     rest of the build's Debian packages);
#   - the PyTorch image's NVIDIA variables.
# Not provided: a CUDA toolkit (CI has no GPU and the CPU build is what it can run), so the
# image built on this base has CPU kernels only. torch from PyPI is the same +cu130 build the
# real image carries, with its CUDA libraries, so the runtime stage copies the same files.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# The CAs this machine added to its own trust store (local-ca/ holds the host's
# /usr/local/share/ca-certificates, often empty): where an egress proxy re-signs TLS, pip in the
# build stage reaches PyPI only if it trusts the same CAs. Debian's pip reads the system store.
COPY local-ca/ /usr/local/share/ca-certificates/
# Debian's current bookworm packages, unpinned as the real image's are its own release's.
# hadolint ignore=DL3008
RUN apt-get update -qq \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
         ca-certificates g++ python3 python3-venv >/dev/null \
    && update-ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# pip is upgraded first, as scripts/env.sh does for its venv, so that it reads the wheels in
# pip's cache that env.sh's venv left (docker/ci/image_test.sh mounts that cache here when the
# builder allows). Unpinned like env.sh's; the pins are torch's and numpy's.
ARG TORCH_REQUIREMENT
ARG NUMPY_REQUIREMENT
RUN python3 -m venv /opt/conda \
    && /opt/conda/bin/python -m pip install -q --upgrade pip \
    && /opt/conda/bin/python -m pip install -q "${TORCH_REQUIREMENT:?}" "${NUMPY_REQUIREMENT:?}" \
    && /opt/conda/bin/python -c 'import torch; print("stand-in build base: torch", torch.__version__)'
ENV PATH=/opt/conda/bin:${PATH} \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64
