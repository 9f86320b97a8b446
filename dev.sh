#!/usr/bin/env bash
# Tributary developer entry point; the README's newcomer commands are:
#   ./dev.sh standalone   set everything up, then start the standalone server
#   ./dev.sh test         set everything up, then run the whole test suite (pytest, in parallel)
#   ./dev.sh test fast    set up Python only, then run the fast tier (tests that start no other process)
set -euo pipefail
cd "$(dirname "$0")"

VENV=.venv
# pytest-xdist workers: more than the cores, since many tests wait on sockets, child processes and timers.
WORKERS="${TRIBUTARY_TEST_WORKERS:-4}"

log() { printf '[dev.sh] %s\n' "$*" >&2; }

ensure_system_packages() {
    # Python's venv module is a separate Debian package on a bare machine.
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
        log "installing python3-venv with apt"
        apt_install python3-venv
    fi
}

ensure_java() {
    # Spark (the spark_io tests) needs Java 17 or newer; Debian's headless JRE is enough.
    if ! java_at_least_17; then
        log "installing openjdk-17-jre-headless with apt (for PySpark)"
        apt_install openjdk-17-jre-headless
    fi
}

ensure_zookeeper() {
    # The replicated-log tests run a real ZooKeeper from Debian's jar (tests/support/zookeeper.py; no service).
    if [ ! -f /usr/share/java/zookeeper.jar ]; then
        log "installing libzookeeper-java with apt (ZooKeeper, for the replicated-log tests)"
        apt_install libzookeeper-java
    fi
}

ensure_chromium() {
    # The web console test drives Debian's headless Chromium through its ChromeDriver (selenium).
    if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
        log "installing chromium and chromium-driver with apt (for the web console test)"
        apt_install chromium chromium-driver
    fi
}

ensure_docs_tools() {
    # The docs test runs the documents' shell commands as written: they use openssl and curl.
    if ! command -v openssl >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then
        log "installing openssl and curl with apt (for the commands in docs/)"
        apt_install openssl curl
    fi
}

ensure_network_tools() {
    # The partition tests (tests/fault/test_partitions.py) put each process in a network namespace (ip) and
    # drop packets between them with nftables rules.
    if ! command -v ip >/dev/null 2>&1 || ! command -v nft >/dev/null 2>&1; then
        log "installing iproute2 and nftables with apt (for the network partition tests)"
        apt_install iproute2 nftables
    fi
}

apt_install() {
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -qq
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

java_at_least_17() {
    command -v java >/dev/null 2>&1 || return 1
    local major
    major=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
    [ -n "$major" ] && [ "$major" -ge 17 ]
}

ensure_python_env() {
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating $VENV"
        python3 -m venv "$VENV"
    fi
    # Reinstall only when pyproject.toml changed since the last successful install.
    local stamp="$VENV/.installed-$(sha1sum pyproject.toml | cut -c1-12)"
    if [ ! -f "$stamp" ]; then
        log "installing tributary and its dependencies into $VENV"
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[test]'
        rm -f "$VENV"/.installed-* && touch "$stamp"
    fi
}

setup() {
    ensure_system_packages
    ensure_python_env
}

command="${1:-}"
shift || true
case "$command" in
    standalone)
        setup
        exec "$VENV/bin/tributary" standalone "$@"
        ;;
    test)
        setup
        if [ "${1:-}" = fast ]; then
            shift
            exec "$VENV/bin/python" -m pytest -m fast -n "$WORKERS" "$@"
        fi
        ensure_java
        ensure_zookeeper
        ensure_chromium
        ensure_docs_tools
        ensure_network_tools
        exec "$VENV/bin/python" -m pytest -n "$WORKERS" "$@"
        ;;
    setup)
        setup
        ;;
    *)
        echo "usage: ./dev.sh {standalone|test [fast]|setup} [args...]" >&2
        exit 2
        ;;
esac
