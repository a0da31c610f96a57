# shellcheck shell=bash
# Shared by start_slurm.sh, stop_slurm.sh and ctl.sh (sourced, not run): which Slurm release runs
# where, stopping a cluster's processes by PID, and naming the program that holds a port.
#
# Releases (SLURM_RELEASE):
#   24.11 (default)  Debian trixie, state in <repo>/.real-slurm,       ports 6817-6820,
#                    data parsers v0.0.40,v0.0.41,v0.0.42
#   26.05            Debian sid,    state in <repo>/.real-slurm-26.05, ports 6837-6840,
#                    data parsers v0.0.42,v0.0.43,v0.0.44,v0.0.45
# so both can run side by side. Every default can be overridden by its own knob.

# slurm_release_defaults REPO: sets RELEASE, STATE, ROOT, SUITE, EXPECT_VERSION, the four ports and
# DATA_PARSERS from SLURM_RELEASE and the knobs, or exits 2 on an unknown release.
slurm_release_defaults() {
    local repo=$1 state_default port_base suite parsers
    RELEASE=${SLURM_RELEASE:-24.11}
    case "$RELEASE" in
        24.11) state_default=$repo/.real-slurm; port_base=6817; suite=trixie
               parsers=v0.0.40,v0.0.41,v0.0.42 ;;
        26.05) state_default=$repo/.real-slurm-26.05; port_base=6837; suite=sid
               parsers=v0.0.42,v0.0.43,v0.0.44,v0.0.45 ;;
        *) echo "SLURM_RELEASE=$RELEASE is not one of 24.11, 26.05" >&2; exit 2 ;;
    esac
    EXPECT_VERSION=$RELEASE
    STATE=${SLURM_STATE_DIR:-$state_default}
    ROOT=${SLURM_ROOT:-$STATE/root}
    SUITE=${DEBIAN_SUITE:-$suite}
    CTLD_PORT=${SLURM_CTLD_PORT:-$port_base}
    SLURMD_PORT=${SLURMD_PORT:-$((port_base + 1))}
    DBD_PORT=${SLURMDBD_PORT:-$((port_base + 2))}
    REST_PORT=${SLURM_REST_PORT:-$((port_base + 3))}
    DATA_PARSERS=${SLURM_REST_DATA_PARSERS:-$parsers}
}

readpid() { [ -s "$1" ] && tr -dc '0-9' < "$1" || true; }

# A PID counts only if that process lives in our chroot ($ROOT): guards against stale PID files and
# reused PIDs (nothing is ever signalled by name).
in_chroot_pid() {
    local pid=$1
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
    [ "$(readlink "/proc/$pid/root" 2>/dev/null)" = "$(readlink -f "$ROOT")" ]
}

# Every daemon's PID file inside the chroot, in start order.
DAEMON_PIDFILES=(/run/munge/munged.pid /run/slurm-ci/mariadbd.pid /run/slurm/slurmdbd.pid
                 /run/slurm/slurmctld.pid /run/slurm/slurmd.pid /run/slurm-ci/slurmrestd.pid)

# stop_pid NAME CHROOT_PIDFILE [TIMEOUT_S]: SIGTERM, wait, SIGKILL; returns 1 if it survives.
stop_pid() {
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
    if in_chroot_pid "$pid"; then log "ERROR: $name pid $pid survived SIGKILL"; return 1; fi
}

# stop_daemons: every daemon of the chroot, in reverse start order; returns 1 if one survived.
stop_daemons() {
    local rc=0
    stop_pid slurmrestd /run/slurm-ci/slurmrestd.pid || rc=1
    stop_pid slurmd     /run/slurm/slurmd.pid || rc=1
    stop_pid slurmctld  /run/slurm/slurmctld.pid 30 || rc=1
    stop_pid slurmdbd   /run/slurm/slurmdbd.pid 30 || rc=1
    stop_pid mariadbd   /run/slurm-ci/mariadbd.pid 60 || rc=1
    stop_pid munged     /run/munge/munged.pid || rc=1
    return $rc
}

# stop_leftovers: whatever else still lives in the chroot (job steps, slurmstepd, strays).
stop_leftovers() {
    local sig left p pid
    for sig in TERM KILL; do
        left=""
        for p in /proc/[0-9]*; do
            pid=${p#/proc/}
            if in_chroot_pid "$pid"; then left="$left $pid"; fi
        done
        [ -z "$left" ] && return 0
        log "leftover processes in the chroot (SIG$sig):$left"
        # shellcheck disable=SC2086
        kill -$sig $left 2>/dev/null || true
        sleep 2
    done
}

# unmount_chroot: the chroot's mounts, deepest first; returns 1 if something stays mounted.
unmount_chroot() {
    local m root_real
    root_real=$(readlink -f "$ROOT")
    for m in run dev/shm dev/pts dev sys proc; do
        if mountpoint -q "$ROOT/$m"; then
            if ! umount "$ROOT/$m"; then
                log "WARN: $ROOT/$m busy, lazy unmount"
                umount -l "$ROOT/$m" || true
            fi
        fi
    done
    if grep -q " $root_real/" /proc/mounts; then
        log "ERROR: still mounted under $ROOT:"; grep " $root_real/" /proc/mounts >&2 || true
        return 1
    fi
}

# port_holder PORT: who listens on TCP PORT (any address), e.g.
#   "pid 11574 (slurmdbd) in chroot /work/main/.real-slurm/root, as user 64030", or "" when free.
port_holder() {
    local port=$1 hex inodes inode fd pid root where
    hex=$(printf '%04X' "$port")
    # /proc/net/tcp{,6}: local_address is ADDR:PORT in hex, state 0A is LISTEN, field 10 the inode
    inodes=$(awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { print $10 }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
    [ -n "$inodes" ] || return 0
    for inode in $inodes; do
        for fd in /proc/[0-9]*/fd/*; do
            if [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ]; then
                pid=${fd#/proc/}; pid=${pid%%/*}
                root=$(readlink "/proc/$pid/root" 2>/dev/null || echo "?")
                where=""
                [ "$root" != / ] && where=" in chroot $root"
                echo "pid $pid ($(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120 | sed 's/ *$//'))$where, as user $(stat -c %u "/proc/$pid" 2>/dev/null)"
                return 0
            fi
        done
    done
    echo "a socket of another network namespace or a process this user cannot see (inode $inodes)"
}
