#!/bin/bash
# Small controls for the running test cluster (start_slurm.sh), for tests that
# need to break or inspect it:
#
#   ctl.sh slurmdbd-stop          stop slurmdbd (by PID) and wait until it is gone
#   ctl.sh slurmdbd-start         start it again and wait until it answers
#   ctl.sh token [USER] [SECONDS] print a fresh JWT (default: the job user, 4 h)
#   ctl.sh add-user USER [UID]    a second unprivileged Slurm user (home, account association)
#   ctl.sh host-path CLUSTER_PATH print where a path inside the cluster is on this host
#   ctl.sh status                 which daemons are up
#
# Finds the cluster through SLURM_ROOT, else through the env file
# (SLURM_ENV_FILE, default $SLURM_STATE_DIR/slurm.env: <repo>/.real-slurm/, or .real-slurm-26.05/
# with SLURM_RELEASE=26.05).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/real_slurm/slurm_lib.sh
. "$HERE/slurm_lib.sh"
slurm_release_defaults "$REPO"   # STATE for SLURM_RELEASE
ENV_FILE=${SLURM_ENV_FILE:-$STATE/slurm.env}
if [ -z "${SLURM_ROOT:-}" ] || [ -z "${SLURM_USER:-}" ]; then
    [ -r "$ENV_FILE" ] || { echo "ctl.sh: no SLURM_ROOT and no env file $ENV_FILE (is the cluster up?)" >&2; exit 1; }
    # shellcheck disable=SC1090
    . "$ENV_FILE"
fi
ROOT=$SLURM_ROOT
# A SLURM_JWT in the environment switches every Slurm program started from here,
# daemons included, to JWT-only auth (slurmdbd then rejects slurmctld's munge).
unset SLURM_JWT
ROOT_REAL=$(readlink -f "$ROOT")
DBD_PID=/run/slurm/slurmdbd.pid

die() { echo "ctl.sh: $*" >&2; exit 1; }
need_root() { [ "$(id -u)" = 0 ] || die "$1 needs root"; }

case "${1:-}" in
slurmdbd-stop)
    need_root "slurmdbd-stop"
    pid=$(readpid "$ROOT$DBD_PID")
    in_chroot_pid "$pid" || { echo "slurmdbd not running"; exit 0; }
    kill -TERM "$pid"
    for _ in $(seq 1 120); do
        in_chroot_pid "$pid" || { echo "slurmdbd (pid $pid) stopped"; exit 0; }
        sleep 0.25
    done
    die "slurmdbd pid $pid still alive after 30 s"
    ;;
slurmdbd-start)
    need_root "slurmdbd-start"
    if ! in_chroot_pid "$(readpid "$ROOT$DBD_PID")"; then
        # stdio to a log: slurmdbd keeps the fds it was started with
        logs=${SLURM_STATE_DIR:-$STATE}/logs
        mkdir -p "$logs"
        chroot "$ROOT" slurmdbd </dev/null >>"$logs/slurmdbd.out" 2>&1
    fi
    for _ in $(seq 1 240); do
        if chroot "$ROOT" sacctmgr -n show cluster >/dev/null 2>&1; then echo "slurmdbd up"; exit 0; fi
        sleep 0.25
    done
    die "slurmdbd not answering 60 s after start (see $ROOT/var/log/slurm/slurmdbd.log)"
    ;;
token)
    need_root "token"
    chroot "$ROOT" scontrol token username="${2:-$SLURM_USER}" lifespan="${3:-14400}" | sed -n 's/^SLURM_JWT=//p'
    ;;
add-user)
    need_root "add-user"
    [ -n "${2:-}" ] || die "usage: ctl.sh add-user USER [UID]"
    chroot "$ROOT" getent passwd "$2" >/dev/null || chroot "$ROOT" useradd -m -u "${3:-2001}" -s /bin/bash "$2"
    account=$(chroot "$ROOT" sacctmgr -n -P show user "$SLURM_USER" format=defaultaccount | head -n 1)
    [ -n "$(chroot "$ROOT" sacctmgr -n -P show user "$2" format=user)" ] ||
        chroot "$ROOT" sacctmgr -i add user "$2" Account="${account:-ci}" >/dev/null
    echo "user $2 ready (account ${account:-ci})"
    ;;
host-path)
    [ -n "${2:-}" ] || die "usage: ctl.sh host-path /path/inside/cluster"
    case "$2" in /*) echo "$ROOT_REAL$2" ;; *) die "cluster path must be absolute: $2" ;; esac
    ;;
status)
    for d in munged:/run/munge/munged.pid mariadbd:/run/slurm-ci/mariadbd.pid slurmdbd:$DBD_PID \
             slurmctld:/run/slurm/slurmctld.pid slurmd:/run/slurm/slurmd.pid slurmrestd:/run/slurm-ci/slurmrestd.pid; do
        pid=$(readpid "$ROOT${d#*:}")
        if in_chroot_pid "$pid"; then echo "${d%%:*} up (pid $pid)"; else echo "${d%%:*} down"; fi
    done
    ;;
*)
    sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
    exit 2
    ;;
esac
