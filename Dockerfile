# tenure agent image: a static binary on an empty base.
#
# The binary is built on the host (no multi-stage build, so the image builds
# without pulling anything from a registry):
#
#   CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o bin/tenure ./cmd/tenure
#   docker build -t tenure:dev .
#
# Ports: 7946 gossip (TCP and UDP), 7947 Raft, 7948 HTTP API, metrics and
# dashboard. State (identity, incarnation counter, Raft log) lives in /data:
# mount a volume there so a restarted container keeps its identity.
FROM scratch
COPY bin/tenure /tenure
ENV TENURE_DATA_DIR=/data \
    TENURE_GOSSIP_ADDR=0.0.0.0:7946 \
    TENURE_RAFT_ADDR=0.0.0.0:7947 \
    TENURE_HTTP_ADDR=0.0.0.0:7948
EXPOSE 7946/tcp 7946/udp 7947/tcp 7948/tcp
VOLUME ["/data"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/tenure"]
CMD ["agent"]
