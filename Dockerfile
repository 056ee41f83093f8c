# lakesink as a container image. Build: docker build -t lakesink .
FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
      cmake libssl-dev libsasl2-dev libcurl4-openssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p lakesink && cp target/release/lakesink /usr/local/bin/lakesink

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 libsasl2-2 \
    && rm -rf /var/lib/apt/lists/* && useradd --system --uid 10001 lakesink
COPY --from=build /usr/local/bin/lakesink /usr/local/bin/lakesink
# glibc's mmap threshold fixed at 4 MiB, not raised as large buffers are freed: resident memory
# then stays flat over a long backlog instead of creeping up (docs/raw-layer.md, Memory over a
# long backlog). Another value: `docker run -e MALLOC_MMAP_THRESHOLD_=...`.
ENV MALLOC_MMAP_THRESHOLD_=4194304
USER lakesink
ENTRYPOINT ["/usr/local/bin/lakesink"]
