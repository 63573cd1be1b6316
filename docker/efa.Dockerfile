# collbench's image for AWS EFA clusters (p4d, p5, p5e): Ray's CUDA image plus the EFA user-space
# libraries (libfabric) and the aws-ofi-nccl plugin. rayproject/ray images have neither; without
# them NCCL silently falls back to TCP sockets and every inter-node row measures TCP.
#
#   docker build -f docker/efa.Dockerfile -t <registry>/collbench-efa:2.60.0 .
#   docker push <registry>/collbench-efa:2.60.0          # then set docker.image in cluster.yaml
#
# The host (the AMI) provides the EFA kernel driver and the NVIDIA driver; the container gets the
# devices with --privileged (cluster.yaml).
ARG RAY_IMAGE=rayproject/ray:2.60.0-py311-cu128
FROM ${RAY_IMAGE}

# The EFA installer puts libfabric in /opt/amazon/efa and, since 1.43, the aws-ofi-nccl plugin in
# /opt/amazon/ofi-nccl (1.47.0: aws-ofi-nccl 1.18.0, which names its network "Libfabric", or "OFI"
# when NCCL_NET=OFI asks for it).
ARG EFA_INSTALLER_VERSION=1.47.0

USER root
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# --skip-kmod: a container cannot load kernel modules; --skip-limit-conf: memlock comes from
# `docker run --ulimit memlock=-1:-1`; --no-verify: the device check needs lspci, blind in a
# container; -g: GPUDirect RDMA support.
RUN cd /tmp \
    && curl -fsSLO https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz \
    && tar -xf aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz \
    && cd aws-efa-installer \
    && ./efa_installer.sh -y -g --skip-kmod --skip-limit-conf --no-verify \
    && cd / && rm -rf /tmp/aws-efa-installer*

# The base image's LD_LIBRARY_PATH only when it has one: an empty entry (a trailing ':') means the
# current directory, so a process would load libraries from wherever it happens to run.
ENV LD_LIBRARY_PATH=/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:/opt/amazon/ofi-nccl/lib:/opt/amazon/efa/lib${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}
ENV PATH=/opt/amazon/efa/bin:${PATH}
# NCCL (bundled with torch) loads the plugin as libnccl-net-ofi.so from LD_LIBRARY_PATH.
ENV NCCL_NET_PLUGIN=ofi \
    FI_PROVIDER=efa \
    FI_EFA_FORK_SAFE=1
# Fail the build, not the cluster: without the plugin where NCCL looks for it (the directories of
# LD_LIBRARY_PATH), NCCL_NET=OFI (cluster.yaml) fails every group, and without NCCL_NET every
# inter-node row would measure TCP sockets. An installer that moved or dropped it stops here.
RUN found=""; \
    for dir in $(echo "$LD_LIBRARY_PATH" | tr ':' ' '); do \
        if [ -e "$dir/libnccl-net-ofi.so" ]; then found="$dir/libnccl-net-ofi.so"; break; fi; \
    done; \
    if [ -z "$found" ]; then \
        echo "libnccl-net-ofi.so (aws-ofi-nccl) is in no directory of LD_LIBRARY_PATH=$LD_LIBRARY_PATH" >&2; exit 1; \
    fi; \
    echo "aws-ofi-nccl plugin: $found"
USER ray
