# Stand-in for docker/Dockerfile's RUNTIME_IMAGE (nvidia/cuda:13.0.1-base-ubuntu24.04), for
# docker/ci/image_test.sh on machines that cannot pull it (CI here reaches no container
# registry). It has what the runtime stage uses of the NVIDIA base image and no more, so that
# anything else the app needs must come from docker/Dockerfile itself:
#   - a minimal distribution: bash, useradd, ldd, glibc, libstdc++ and libgcc_s (Debian's
#     minbase has them; the NVIDIA image is Ubuntu's minimal image plus a few packages);
#   - the NVIDIA image's environment, which the NVIDIA container runtime and Kubernetes GPU
#     plugins rely on (the driver's nvidia-smi and libcuda under /usr/local/nvidia where they
#     are mounted there), so that a runtime stage that drops it shows here too.
# The CUDA runtime libraries of the NVIDIA image are not provided: the app uses libtorch's.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:${PATH} \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
