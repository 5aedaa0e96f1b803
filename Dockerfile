# hookgate container image.
#
#   docker build -t hookgate .
#   docker run -p 8443:8443 -p 127.0.0.1:9090:9090 \
#     -v $PWD/gateway.toml:/etc/hookgate/gateway.toml:ro -v hookgate-data:/var/lib/hookgate hookgate
#
# Health: the runtime image is distroless (no shell, no curl), so there is no
# Docker HEALTHCHECK; orchestrators probe the admin listener instead
# (GET /healthz for liveness, GET /readyz for readiness) — see deploy/.

# ---- build: dependencies first, in their own cached layer
FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src/bin/hookgate bench \
    && echo 'fn main() {}' > src/bin/hookgate/main.rs \
    && touch src/lib.rs \
    && for f in upstream store load; do echo 'fn main() {}' > "bench/$f.rs"; done \
    && cargo build --release --locked --bin hookgate \
    && rm -rf src bench
COPY src ./src
COPY bench ./bench
RUN touch src/bin/hookgate/main.rs src/lib.rs && cargo build --release --locked --bin hookgate

# ---- runtime: glibc + libgcc only, non-root
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/hookgate /usr/local/bin/hookgate
COPY gateway.toml.example /etc/hookgate/gateway.toml.example
ENV HOOKGATE_CONFIG=/etc/hookgate/gateway.toml
# The embedded store's default path (hookgate.db) is relative: keep it on a volume.
WORKDIR /var/lib/hookgate
VOLUME ["/var/lib/hookgate"]
USER 65532:65532
# 8443: public webhooks (TLS when [server].tls is set); 9090: admin (/metrics, /healthz, /readyz)
EXPOSE 8443 9090
ENTRYPOINT ["/usr/local/bin/hookgate"]
CMD ["run"]
