#!/bin/bash
# Stop the loopback Slurm started by start_slurm.sh and unmount its chroot.
#
#   stop_slurm.sh            cancel jobs, stop daemons, unmount (the chroot stays
#                            cached, so the next start takes seconds)
#   stop_slurm.sh --purge    also delete the chroot
#
# Every process is stopped by PID (daemon PID files, plus a scan of /proc for
# processes whose root is our chroot); nothing is ever killed by name.
# Env: SLURM_RELEASE [24.11], SLURM_STATE_DIR [<repo>/.real-slurm; .real-slurm-26.05 for 26.05],
#      SLURM_ROOT [$SLURM_STATE_DIR/root]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/real_slurm/slurm_lib.sh
. "$HERE/slurm_lib.sh"
slurm_release_defaults "$REPO"   # STATE and ROOT for SLURM_RELEASE (24.11: .real-slurm, 26.05: .real-slurm-26.05)
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

mkdir -p "$STATE"
exec 9>"$STATE/.lock"
flock -w 300 9 || { log "another start/stop_slurm.sh holds $STATE/.lock"; exit 1; }

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
stop_daemons || rc=1
# 3. whatever else still lives in the chroot (job steps, slurmstepd, strays)
stop_leftovers
# 4. unmount, deepest first
unmount_chroot || rc=1
# the env file describes a running cluster; it is written anew by the next start
rm -f "$STATE/slurm.env"
[ $rc != 0 ] || log "stopped; no mounts left under $ROOT"

if [ $PURGE = 1 ]; then
    if [ $rc = 0 ]; then
        log "purging $ROOT"
        rm -rf --one-file-system "$ROOT"
    else
        log "ERROR: not purging $ROOT: something is still mounted or running"
    fi
fi
exit $rc
