# syntax=docker/dockerfile:1
FROM rust:1-bookworm AS build
WORKDIR /src
# Everything the build embeds (migrations, static pages, clients); .dockerignore keeps out the rest.
COPY . .
RUN cargo build --release --locked --bin mnemo && strip target/release/mnemo

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home mnemo
COPY --from=build /src/target/release/mnemo /usr/local/bin/mnemo
USER mnemo
ENV MNEMO_LISTEN=0.0.0.0:8080
# The local model's matrix library splits each product over this many threads (and without it
# reads /proc/cpuinfo at every product): keep it equal to MNEMO_EMBEDDING_THREADS (default 1).
ENV RAYON_NUM_THREADS=1
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8080/healthz || exit 1
ENTRYPOINT ["mnemo"]
CMD ["serve"]
