#!/usr/bin/env bash
# A production-shaped Airflow deployment on this machine, every process its own, on loopback:
# PostgreSQL (metadata database), Redis (Celery broker), api-server, scheduler, dag-processor,
# two Celery workers and two triggerers; the cluster is the provider's emulator (simulated runs).
#
#   bash tests/deployment/deploy.sh up      # installs what it needs, starts everything, writes $STATE/env
#   bash tests/deployment/deploy.sh install # only installs what it needs (Debian's packages, the Celery provider)
#   bash tests/deployment/deploy.sh install-debian  # only Debian's packages (no virtualenv needed)
#   bash tests/deployment/deploy.sh status  # which processes run
#   bash tests/deployment/deploy.sh kill NAME [SIGNAL]   # e.g. kill triggerer-1 KILL
#   bash tests/deployment/deploy.sh start NAME           # (re)start one process
#   bash tests/deployment/deploy.sh down    # stops everything and removes $STATE
#
# Settings (environment): DEPLOY_STATE (where everything lives, default /var/tmp/slurmapi-deployment),
# DEPLOY_CONNECTION (the slurmapi_default connection as JSON; default: start the emulator, simulated runs),
# DEPLOY_TRIGGERERS (1 or 2, default 2), DEPLOY_WORKER_CONCURRENCY (task slots per worker, default 8),
# DEPLOY_TRIGGERER_CAPACITY (triggers one triggerer runs at most, Airflow's default 1000),
# DEPLOY_DAGS (the DAGs folder), the DEPLOY_*_PORT below.
#
# To deploy the same way for real, keep the shape and replace: trust auth and fixed ports (test-only),
# the emulator (your cluster's connection), the hostname callable (each process's own name here, where a
# real deployment has one machine per process), and run each process under a supervisor (systemd, k8s).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
STATE=${DEPLOY_STATE:-/var/tmp/slurmapi-deployment}
VENV=${VENV:-.venv}
PY=$ROOT/$VENV/bin/python
AIRFLOW=$ROOT/$VENV/bin/airflow
PG_PORT=${DEPLOY_PG_PORT:-54329}
REDIS_PORT=${DEPLOY_REDIS_PORT:-63799}
API_PORT=${DEPLOY_API_PORT:-28080}
EMU_PORT=${DEPLOY_EMULATOR_PORT:-28090}
DAGS=${DEPLOY_DAGS:-$ROOT/tests/deployment/dags}
TRIGGERERS=${DEPLOY_TRIGGERERS:-2}
PROCESSES=(api-server scheduler dag-processor worker-1 worker-2)
for i in $(seq 1 "$TRIGGERERS"); do PROCESSES+=("triggerer-$i"); done

log() { echo "[deploy $(date +%H:%M:%S)] $*" >&2; }
pg_bin() { ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1; }

install_debian() {
    local missing=()
    [ -n "$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null)" ] || missing+=(postgresql)
    command -v redis-server >/dev/null || missing+=(redis-server)
    if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]} (Debian)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
    fi
}

install_deps() {
    install_debian
    if ! "$PY" -c "import airflow.providers.celery, psycopg, psycopg2, asyncpg, redis" 2>/dev/null; then
        log "installing the Celery provider and psycopg2"
        local version pin=()
        version=$("$PY" -c 'import airflow; print(airflow.__version__)')
        # The versions CI ran with, when the repository has them (constraints/airflow-<version>.txt).
        [ -f "$ROOT/constraints/airflow-$version.txt" ] && pin=(-c "$ROOT/constraints/airflow-$version.txt")
        "$ROOT/$VENV/bin/uv" pip install -q --python "$PY" "${pin[@]}" apache-airflow-providers-celery \
            psycopg2-binary "psycopg[binary]" asyncpg redis "apache-airflow==$version"
    fi
}

write_env() {
    local jwt secret fernet
    jwt=$("$PY" -c 'import os; print(os.urandom(32).hex())')
    secret=$("$PY" -c 'import os; print(os.urandom(24).hex())')
    fernet=$("$PY" -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')
    cat > "$STATE/env" <<EOF
AIRFLOW_HOME=$STATE/airflow
AIRFLOW__CORE__EXECUTOR=CeleryExecutor
AIRFLOW__CORE__LOAD_EXAMPLES=False
AIRFLOW__CORE__DAGS_FOLDER=$DAGS
AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION=False
AIRFLOW__CORE__FERNET_KEY=$fernet
AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS=True
AIRFLOW__CORE__EXECUTION_API_SERVER_URL=http://127.0.0.1:$API_PORT/execution/
AIRFLOW__CORE__PARALLELISM=64
AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=postgresql+psycopg2://airflow:airflow@127.0.0.1:$PG_PORT/airflow
AIRFLOW__CELERY__BROKER_URL=redis://127.0.0.1:$REDIS_PORT/0
AIRFLOW__CELERY__RESULT_BACKEND=db+postgresql://airflow:airflow@127.0.0.1:$PG_PORT/airflow
AIRFLOW__CELERY__WORKER_CONCURRENCY=${DEPLOY_WORKER_CONCURRENCY:-8}
AIRFLOW__API__HOST=127.0.0.1
AIRFLOW__API__PORT=$API_PORT
AIRFLOW__API__WORKERS=1
AIRFLOW__API__SECRET_KEY=$secret
AIRFLOW__API_AUTH__JWT_SECRET=$jwt
AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC=1
AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD=15
AIRFLOW__TRIGGERER__CAPACITY=${DEPLOY_TRIGGERER_CAPACITY:-1000}
AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL=5
AIRFLOW__LOGGING__BASE_LOG_FOLDER=$STATE/airflow/logs
AIRFLOW__CORE__HOSTNAME_CALLABLE=deploy_hostname.hostname
PYTHONPATH=$ROOT/tests/deployment
EOF
}

# Each worker and triggerer gets its own log-server port (two on one host would clash) and its own loopback
# address as its hostname (tests/deployment/deploy_hostname.py): the metadata database tells the two
# triggerers apart, as two machines' hostnames would, and the api-server still reaches their log servers.
process_env() {
    case $1 in
        worker-1) echo DEPLOY_HOSTNAME=127.0.0.21 AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=28793 ;;
        worker-2) echo DEPLOY_HOSTNAME=127.0.0.22 AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT=28794 ;;
        triggerer-1) echo DEPLOY_HOSTNAME=127.0.0.11 AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=28795 ;;
        triggerer-2) echo DEPLOY_HOSTNAME=127.0.0.12 AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT=28796 ;;
        *) echo DEPLOY_PROCESS="$1" ;;
    esac
}

command_of() {
    case $1 in
        api-server) echo "$AIRFLOW api-server" ;;
        scheduler) echo "$AIRFLOW scheduler" ;;
        dag-processor) echo "$AIRFLOW dag-processor" ;;
        worker-*) echo "$AIRFLOW celery worker --celery-hostname $1@%h --skip-serve-logs" ;;
        triggerer-*) echo "$AIRFLOW triggerer" ;;
        emulator) echo "$PY -m airflow_provider_slurmapi.emulator --simulate --port $EMU_PORT --state-dir $STATE/emulator --partition debug=100000 --min-job-age 600" ;;
    esac
}

start_one() {
    local name=$1
    # shellcheck disable=SC2046
    (set -a; . "$STATE/env"; export $(process_env "$name"); set +a
     exec setsid $(command_of "$name") >"$STATE/logs/$name.log" 2>&1 </dev/null) &
    echo $! > "$STATE/pids/$name"
    log "$name started (pid $!)"
}

up() {
    install_deps
    mkdir -p "$STATE/logs" "$STATE/pids" "$STATE/airflow"
    chmod 755 "$STATE"
    local bin; bin=$(pg_bin)
    if [ ! -d "$STATE/pg" ]; then
        install -d -o postgres -g postgres "$STATE/pg" "$STATE/pg-run"
        runuser -u postgres -- "$bin/initdb" -D "$STATE/pg" --auth=trust -U postgres >/dev/null
    fi
    runuser -u postgres -- "$bin/pg_ctl" -D "$STATE/pg" -l "$STATE/pg-run/postgres.log" -w \
        -o "-p $PG_PORT -k $STATE/pg-run -c listen_addresses=127.0.0.1 -c max_connections=300" start >/dev/null
    "$bin/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "CREATE USER airflow PASSWORD 'airflow'" 2>/dev/null || true
    "$bin/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c "CREATE DATABASE airflow OWNER airflow" 2>/dev/null || true
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --pidfile "$STATE/pids/redis.pid" --logfile "$STATE/logs/redis.log" --dir "$STATE"
    write_env
    local deadline
    if [ -n "${DEPLOY_CONNECTION:-}" ]; then
        printf 'AIRFLOW_CONN_SLURMAPI_DEFAULT=%q\n' "$DEPLOY_CONNECTION" >> "$STATE/env"
    else
        start_one emulator
        deadline=$((SECONDS + 60))
        until grep -q "^export AIRFLOW_CONN_SLURMAPI_DEFAULT=" "$STATE/logs/emulator.log" 2>/dev/null; do
            [ $SECONDS -lt $deadline ] || { log "the emulator did not start: $STATE/logs/emulator.log"; exit 1; }
            sleep 0.5
        done
        sed -n 's/^export //p' "$STATE/logs/emulator.log" >> "$STATE/env"
    fi
    log "migrating the metadata database (PostgreSQL :$PG_PORT)"
    (set -a; . "$STATE/env"; set +a; "$AIRFLOW" db migrate >"$STATE/logs/migrate.log" 2>&1)
    for name in "${PROCESSES[@]}"; do start_one "$name"; done
    deadline=$((SECONDS + 120))
    until curl -fs "http://127.0.0.1:$API_PORT/api/v2/monitor/health" >/dev/null 2>&1; do
        [ $SECONDS -lt $deadline ] || { log "the api-server did not come up: $STATE/logs/api-server.log"; exit 1; }
        sleep 1
    done
    log "up: http://127.0.0.1:$API_PORT (env: $STATE/env)"
}

status() {
    for name in "${PROCESSES[@]}"; do
        local pid; pid=$(cat "$STATE/pids/$name" 2>/dev/null || true)
        if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then echo "$name running $pid"; else echo "$name stopped"; fi
    done
}

down() {
    for name in "${PROCESSES[@]}" emulator; do
        local pid; pid=$(cat "$STATE/pids/$name" 2>/dev/null || true)
        [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true
    done
    sleep 3
    for name in "${PROCESSES[@]}" emulator; do
        local pid; pid=$(cat "$STATE/pids/$name" 2>/dev/null || true)
        [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true
    done
    [ -f "$STATE/pids/redis.pid" ] && kill "$(cat "$STATE/pids/redis.pid")" 2>/dev/null || true
    [ -d "$STATE/pg" ] && runuser -u postgres -- "$(pg_bin)/pg_ctl" -D "$STATE/pg" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$STATE"
    log "down"
}

case ${1:-} in
    up) up ;;
    install) install_deps ;;
    install-debian) install_debian ;;
    down) down ;;
    status) status ;;
    start) start_one "$2" ;;
    kill) kill "-${3:-TERM}" -- "-$(cat "$STATE/pids/$2")" ;;
    *) echo "usage: $0 up|install|install-debian|down|status|start NAME|kill NAME [SIGNAL]" >&2; exit 2 ;;
esac
