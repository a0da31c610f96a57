#!/bin/bash
# Stop the loopback Slurm started by start_slurm.sh and unmount its chroot.
#
#   stop_slurm.sh            cancel jobs, stop daemons, unmount (the chroot stays
#                            cached, so the next start takes seconds)
#   stop_slurm.sh --purge    also delete the chroot
#
# Every process is stopped by PID (daemon PID files, plus a scan of /proc for
# processes whose root is our chroot); nothing is ever killed by name.
# Env: SLURM_STATE_DIR [<repo>/.real-slurm], SLURM_ROOT [$SLURM_STATE_DIR/root]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
STATE=${SLURM_STATE_DIR:-$REPO/.real-slurm}
ROOT=${SLURM_ROOT:-$STATE/root}
RUNDIR=/run/slurm-ci
PURGE=0
case "${1:-}" in
    --purge) PURGE=1 ;;
    "") ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
esac
rc=0

log() { echo "[stop_slurm $(date +%T)] $*"; }

if [ "$(id -u)" != 0 ]; then echo "[stop_slurm] must run as root" >&2; exit 77; fi
if [ ! -d "$ROOT" ]; then log "$ROOT does not exist, nothing to do"; exit 0; fi
ROOT_REAL=$(readlink -f "$ROOT")

mkdir -p "$STATE"
exec 9>"$STATE/.lock"
flock -w 300 9 || { log "another start/stop_slurm.sh holds $STATE/.lock"; exit 1; }

readpid() { [ -s "$1" ] && tr -dc '0-9' < "$1" || true; }
in_chroot_pid() {   # guards against stale PID files and reused PIDs
    local pid=$1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$ROOT_REAL" ]
}
stop_pid() {  # name chroot-pidfile [timeout_s]
    local name=$1 pid t=${3:-20} i
    pid=$(readpid "$ROOT$2")
    if ! in_chroot_pid "$pid"; then log "$name: not running"; return 0; fi
    log "$name: SIGTERM pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < t * 4; i++)); do
        in_chroot_pid "$pid" || { log "$name: stopped"; return 0; }
        sleep 0.25
    done
    log "$name: still alive after ${t}s, SIGKILL pid $pid"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
    if in_chroot_pid "$pid"; then log "ERROR: $name pid $pid survived SIGKILL"; rc=1; fi
}

# 1. cancel jobs first, so their processes end through Slurm and not by our kill
if in_chroot_pid "$(readpid "$ROOT/run/slurm/slurmctld.pid")"; then
    jobs=$(chroot "$ROOT" squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
    if [ -n "${jobs// /}" ]; then
        log "cancelling jobs: $jobs"
        # shellcheck disable=SC2086
        chroot "$ROOT" scancel $jobs 2>/dev/null || true
        for _ in $(seq 1 40); do
            [ -z "$(chroot "$ROOT" squeue -h -t R,CG -o %i 2>/dev/null || true)" ] && break
            sleep 0.25
        done
    fi
fi

# 2. daemons, in reverse start order
stop_pid slurmrestd "$RUNDIR/slurmrestd.pid"
stop_pid slurmd     /run/slurm/slurmd.pid
stop_pid slurmctld  /run/slurm/slurmctld.pid 30
stop_pid slurmdbd   /run/slurm/slurmdbd.pid 30
stop_pid mariadbd   "$RUNDIR/mariadbd.pid" 60
stop_pid munged     /run/munge/munged.pid

# 3. whatever else still lives in the chroot (job steps, slurmstepd, strays)
for sig in TERM KILL; do
    left=""
    for p in /proc/[0-9]*; do
        pid=${p#/proc/}
        if in_chroot_pid "$pid"; then left="$left $pid"; fi
    done
    [ -z "$left" ] && break
    log "leftover processes in the chroot (SIG$sig):$left"
    # shellcheck disable=SC2086
    kill -$sig $left 2>/dev/null || true
    sleep 2
done

# 4. unmount, deepest first
for m in run dev/shm dev/pts dev sys proc; do
    if mountpoint -q "$ROOT/$m"; then
        if ! umount "$ROOT/$m"; then
            log "WARN: $ROOT/$m busy, lazy unmount"
            umount -l "$ROOT/$m" || rc=1
        fi
    fi
done
# the env file describes a running cluster; it is written anew by the next start
rm -f "$STATE/slurm.env"
if grep -q " $ROOT_REAL/" /proc/mounts; then
    log "ERROR: still mounted under $ROOT:"; grep " $ROOT_REAL/" /proc/mounts || true; rc=1
else
    log "stopped; no mounts left under $ROOT"
fi

if [ $PURGE = 1 ]; then
    if [ $rc = 0 ]; then
        log "purging $ROOT"
        rm -rf --one-file-system "$ROOT"
    else
        log "ERROR: not purging $ROOT: something is still mounted or running"
    fi
fi
exit $rc
