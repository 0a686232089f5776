# syntax=docker/dockerfile:1.7
# CUDA image of the speech server. libtorch comes from the PyPI torch wheel, installed by the
# same scripts/setup.sh the README commands use (VOXTRAL_CUDA=1: with the CUDA runtime wheels).
#   docker build -t voxtral-tts .
#   docker run --gpus all -p 8000:8000 -v /path/to/Voxtral-4B-TTS-2603:/models/voxtral:ro voxtral-tts

ARG RUST_IMAGE=rust:1.95-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.1-runtime-ubuntu24.04

FROM ${RUST_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake python3 python3-pip \
    && rm -rf /var/lib/apt/lists/*
ENV VOXTRAL_CUDA=1 VOXTRAL_DEPS=/opt/voxtral PIP_BREAK_SYSTEM_PACKAGES=1
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
RUN scripts/setup.sh --libtorch-only
COPY . .
# The binary's rpath points at /opt/voxtral/py/torch/lib: the runtime stage keeps that path.
# The default features (no `testkit`): the image serves real weights and carries no random
# checkpoint generator (make-test-model).
RUN eval "$(scripts/setup.sh --env --libtorch-only)" \
    && cargo build --release --locked --bin voxtral-tts \
    && install -D target/release/voxtral-tts /opt/voxtral/bin/voxtral-tts

FROM ${CUDA_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --uid 10001 --create-home --shell /usr/sbin/nologin voxtral
COPY --from=build /opt/voxtral/py/torch/lib /opt/voxtral/py/torch/lib
COPY --from=build /opt/voxtral/py/nvidia /opt/voxtral/py/nvidia
COPY --from=build /opt/voxtral/bin/voxtral-tts /usr/local/bin/voxtral-tts
COPY config /etc/voxtral
USER 10001
VOLUME ["/models"]
EXPOSE 8000
ENV VOXTRAL_DEVICE=cuda
HEALTHCHECK --interval=30s --timeout=5s --start-period=300s --retries=3 \
    CMD ["curl", "-fsS", "http://127.0.0.1:8000/health"]
ENTRYPOINT ["voxtral-tts", "serve", "--config", "/etc/voxtral/default.toml", "--model", "/models/voxtral", "--host", "0.0.0.0", "--port", "8000"]
