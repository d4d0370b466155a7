# megatron-oellm cluster image: NGC PyTorch (and its own Transformer Engine) with megatron-oellm and its gdn and hf
# extras at pinned versions.
#
#   docker build -t megatron-oellm:0.2.0.dev0-hybridep --target hybridep .  # + DeepEP's hybrid-ep branch (the recipes')
#   docker build -t megatron-oellm:0.2.0.dev0 .                             # default target: oellm (no DeepEP)
#   docker build -t megatron-oellm:0.2.0.dev0-deepep --target deepep .      # + DeepEP's main branch (no HybridEP)
#   apptainer build megatron-oellm-0.2.0.dev0-hybridep.sif docker-daemon://megatron-oellm:0.2.0.dev0-hybridep
#   apptainer build megatron-oellm-0.2.0.dev0.sif docker-daemon://megatron-oellm:0.2.0.dev0
#
# An image runs on the CPU architecture it was built for: x86_64 (linux/amd64) for MareNostrum 5, aarch64
# (linux/arm64) for Jupiter's GH200. The base image has both; build Jupiter's on an aarch64 machine or with
#   docker buildx build --platform linux/arm64 -t megatron-oellm:0.2.0.dev0-hybridep-arm64 --target hybridep \
#     --build-arg HYBRID_EP_MULTINODE=1 --load .   # the Jupiter recipes' HybridEP groups span nodes
#   apptainer build megatron-oellm-0.2.0.dev0-hybridep-arm64.sif docker-daemon://megatron-oellm:0.2.0.dev0-hybridep-arm64
# (docs/container.md has the Apptainer steps). Every recipe in examples/oellm/ dispatches MoE tokens with the flex
# dispatcher's HybridEP (some rows with DeepEP or all-to-all) and names the hybridep target's image:
# megatron-oellm-0.2.0.dev0-hybridep.sif on MareNostrum 5, megatron-oellm-0.2.0.dev0-hybridep-arm64.sif on Jupiter
# (its DeepEP has HybridEP and DeepEP's own dispatcher). The default target's image runs only the all-to-all
# dispatcher.
ARG BASE_IMAGE=nvcr.io/nvidia/pytorch:26.03-py3

FROM ${BASE_IMAGE} AS base
# in the base stage, so that every target's image (the recipes' hybridep one too) carries them
LABEL org.opencontainers.image.title="megatron-oellm" \
      org.opencontainers.image.description="OpenEuroLLM distribution of Megatron-LM on NGC PyTorch" \
      org.opencontainers.image.version="0.2.0.dev0"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
WORKDIR /opt/megatron-oellm

# Keep the base's CUDA stack: torch, Triton, Transformer Engine and the NVIDIA wheels stay at the base's versions.
RUN pip list --format=freeze \
    | grep -iE '^(torch|torchvision|triton|pytorch-triton|transformer[-_]engine[-_a-z0-9]*|nvidia-[a-z0-9-]+)==' \
    > /opt/base-constraints.txt
COPY docker/constraints.txt /opt/oellm-constraints.txt

# Layer order: the requirements and DeepEP (a long CUDA build) come before the package's code and README, so a change
# to them rebuilds only each target's last layers. Here the package is installed from setup.py and its version file
# alone (an empty README stands in for the one setup.py reads), which brings every requirement; each target then
# installs the whole package over it (--no-deps).
COPY setup.py ./
COPY megatron/oellm/__init__.py ./megatron/oellm/__init__.py
RUN touch README.md

# te: the base's Transformer Engine (built by NVIDIA against this torch) is the te extra; reinstalling it from PyPI
# would replace it. gdn and hf come at the versions of docker/constraints.txt.
RUN python -c "import transformer_engine.pytorch" \
    && pip install --no-cache-dir --no-build-isolation \
        -c /opt/base-constraints.txt -c /opt/oellm-constraints.txt ".[gdn,hf]"

# fla 0.6.0's GDN backward on Hopper needs TileLang where Triton < 3.7.1 (fla issue 640; `oellm doctor` checks it).
# The Triton check is its own step: a triton that does not import fails the build (it used to read as "new enough").
# TileLang and the requirements pinned with it come as wheels only: their source builds (TileLang's builds TVM) take
# hours or need toolchains the base may lack, so a missing wheel fails in seconds. The import then proves the stack.
RUN needs_tilelang="$(python -c "import triton; from packaging.version import Version; \
print(int(Version(triton.__version__) < Version('3.7.1')))")" \
    && case "${needs_tilelang}" in \
        1) PIP_ONLY_BINARY=tilelang,apache-tvm-ffi,z3-solver,torch-c-dlpack-ext \
           pip install --no-cache-dir -c /opt/base-constraints.txt -c /opt/oellm-constraints.txt tilelang==0.1.15 \
           && python -c "import tilelang" ;; \
        0) ;; \
        *) echo "error: the Triton check printed '${needs_tilelang}', not 0 or 1" >&2; exit 1 ;; \
    esac

FROM base AS deepep-build
ARG DEEPEP_REPO=https://github.com/deepseek-ai/DeepEP.git
ARG DEEPEP_REF=main
ARG TORCH_CUDA_ARCH_LIST=9.0
RUN git clone "${DEEPEP_REPO}" /opt/DeepEP \
    && git -C /opt/DeepEP checkout "${DEEPEP_REF}" \
    && pip install --no-cache-dir --no-build-isolation -c /opt/base-constraints.txt /opt/DeepEP \
    && python -c "import deep_ep"

FROM base AS hybridep-build
ARG DEEPEP_REPO=https://github.com/deepseek-ai/DeepEP.git
# HybridEP lives on DeepEP's hybrid-ep branch. The default is the commit of that branch the Jupiter reference runs used
# (deep_ep 1.2.1+7febc6e), so that two builds of this file give the same DeepEP; --build-arg DEEPEP_REF=hybrid-ep
# takes the branch's head instead.
ARG DEEPEP_REF=7febc6e25660af0f54d95dd781ecdcd62265ecca
ARG TORCH_CUDA_ARCH_LIST=9.0
# HybridEP across nodes (an expert-parallel group larger than one node's NVLink domain: the Jupiter recipes) needs
# DeepEP built with HYBRID_EP_MULTINODE=1, which also needs the RDMA core headers and libraries (RDMA_CORE_HOME, where
# the base keeps them outside the default paths); the default build is single-node (docs/container.md, "HybridEP
# across nodes").
ARG HYBRID_EP_MULTINODE=0
ARG RDMA_CORE_HOME=
# The setting, readable in the image: `docker inspect` shows the label; `oellm doctor` names it (hybrid-ep-multinode).
LABEL org.openeurollm.hybrid-ep-multinode="${HYBRID_EP_MULTINODE}"
ENV OELLM_HYBRID_EP_MULTINODE=${HYBRID_EP_MULTINODE}
# A DEEPEP_REF without HybridEP (e.g. main) would build an image whose recipes fail at model build: refuse it here.
RUN git clone "${DEEPEP_REPO}" /opt/DeepEP \
    && git -C /opt/DeepEP checkout "${DEEPEP_REF}" \
    && HYBRID_EP_MULTINODE="${HYBRID_EP_MULTINODE}" RDMA_CORE_HOME="${RDMA_CORE_HOME}" \
       pip install --no-cache-dir --no-build-isolation -c /opt/base-constraints.txt /opt/DeepEP \
    && { python -c "from deep_ep import Buffer, HybridEPBuffer" \
         || { echo "error: DeepEP ${DEEPEP_REF} does not import HybridEPBuffer (the ImportError above): a ref without" \
                   "it needs --build-arg DEEPEP_REF=<a commit of DeepEP's hybrid-ep branch>, or --target deepep for" \
                   "DeepEP without HybridEP; a missing library is the build's" >&2; exit 1; }; }

# The targets: the package's code over the stage below it, then the image's check (versions and known-bad
# combinations; no GPU at build time, so GPU checks are warnings).
FROM deepep-build AS deepep
COPY README.md ./
COPY megatron ./megatron
RUN pip install --no-cache-dir --no-deps --no-build-isolation . && oellm doctor

FROM hybridep-build AS hybridep
COPY README.md ./
COPY megatron ./megatron
RUN pip install --no-cache-dir --no-deps --no-build-isolation . && oellm doctor

FROM base AS oellm
COPY README.md ./
COPY megatron ./megatron
RUN pip install --no-cache-dir --no-deps --no-build-isolation . && oellm doctor
