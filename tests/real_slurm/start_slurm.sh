#!/bin/bash
# Bring up a REAL single-node Slurm on loopback for tests/real_slurm:
#   munged, mariadbd (socket only), slurmdbd, slurmctld, slurmd and
#   slurmrestd (JWT auth) on 127.0.0.1:$SLURM_REST_PORT.
#
# SLURM_RELEASE picks the Slurm (see slurm_lib.sh):
#   24.11 (default)  slurm-wlm 24.11 from Debian trixie, data parsers v0.0.40..v0.0.42,
#                    state in <repo>/.real-slurm, ports 6817-6820
#   26.05            slurm-wlm 26.05 from Debian sid, data parsers v0.0.42..v0.0.45,
#                    state in <repo>/.real-slurm-26.05, ports 6837-6840
# so the two run side by side.
#
# Slurm runs inside a debootstrapped Debian chroot, so the host's own packages
# and libc stay untouched; only `debootstrap` is apt-installed on the host when
# missing.  The chroot is cached: a second run reuses it (no network needed) and
# leaves daemons that are already up alone.
#
# When the start fails part way, everything this run started is stopped again
# (daemons by PID, and the chroot's mounts once nothing runs in it), and a port
# another program holds is named with that program.
#
# Exit codes:  0 up;  77 this machine cannot run it (not root, cannot mount or
# chroot, Debian archive unreachable);  anything else: it should have worked
# and did not (daemon logs are printed).
#
# Env knobs (defaults in brackets; the release changes the marked ones):
#   SLURM_RELEASE   [24.11]                24.11 or 26.05
#   SLURM_STATE_DIR [<repo>/.real-slurm]*  env file, logs, lock
#   SLURM_ROOT      [$SLURM_STATE_DIR/root] the chroot (cached between runs)
#   SLURM_CTLD_PORT [6817]*  SLURMD_PORT [6818]*  SLURMDBD_PORT [6819]*
#   SLURM_REST_PORT [6820]*                slurmrestd listens on 127.0.0.1:PORT
#   SLURM_MIN_JOB_AGE [10]                 seconds a finished job stays in slurmctld's queue
#   SLURM_CPUS      [8]                    CPUs the node claims (may exceed the machine)
#   SLURM_CRED_EXPIRE [10]                 AuthInfo=cred_expire: seconds a requeued job waits to run again
#   SLURM_SCHED_INTERVAL [2]               seconds between the main scheduler's passes (sched_interval)
#   SLURM_JOB_USER  [ciuser]               unprivileged user jobs run as, tokens are for
#   SLURM_TOKEN_LIFESPAN [14400]           seconds
#   SLURM_REST_DATA_PARSERS [v0.0.40,v0.0.41,v0.0.42]*
#   DEBIAN_MIRROR [http://deb.debian.org/debian]   DEBIAN_SUITE [trixie]*
#
# Partitions, all on the one node: debug (the default), preemptible (PreemptMode=REQUEUE) and urgent (a
# higher PriorityTier, whose jobs preempt preemptible's); debug neither preempts nor is preempted.
#
# Writes $SLURM_STATE_DIR/slurm.env (SLURM_REST_URL, SLURM_JWT, SLURM_USER,
# SLURM_ROOT, SLURM_PARTITION, SLURM_PREEMPTIBLE_PARTITION, SLURM_PREEMPTOR_PARTITION, SLURM_VERSION,
# SLURM_API_VERSIONS, SLURM_CTL, ...),
# $SLURM_STATE_DIR/timings.txt, logs under $SLURM_STATE_DIR/logs and daemon logs
# in $SLURM_ROOT/var/log/slurm/.
set -Eeuo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# shellcheck source=tests/real_slurm/slurm_lib.sh
. "$HERE/slurm_lib.sh"
slurm_release_defaults "$REPO"   # RELEASE STATE ROOT SUITE EXPECT_VERSION *_PORT DATA_PARSERS
REST_ADDR=127.0.0.1:$REST_PORT
MIN_JOB_AGE=${SLURM_MIN_JOB_AGE:-10}
NODE_CPUS=${SLURM_CPUS:-8}
JOB_USER=${SLURM_JOB_USER:-ciuser}
JOB_UID=${SLURM_JOB_UID:-2000}
TOKEN_LIFESPAN=${SLURM_TOKEN_LIFESPAN:-14400}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CLUSTER=ci
ACCOUNT=ci
PARTITION=debug
PREEMPTIBLE_PARTITION=preemptible
PREEMPTOR_PARTITION=urgent
CRED_EXPIRE=${SLURM_CRED_EXPIRE:-10}
SCHED_INTERVAL=${SLURM_SCHED_INTERVAL:-2}
DB_PASS=slurmdbpass   # socket-only MariaDB inside the chroot; not a secret
PING_API=v0.0.42      # served by both releases; any served version would do for readiness checks

EXIT_CANNOT_RUN=77
# A SLURM_JWT in the environment switches every Slurm program started from here,
# daemons included, to JWT-only auth (slurmdbd then rejects slurmctld's munge).
unset SLURM_JWT
LOGS=$STATE/logs
RUNDIR=/run/slurm-ci  # inside the chroot; a tmpfs, so stale PID files cannot outlive a stop
TIMINGS=$STATE/timings.txt
STARTED=()   # "name pidfile" of each daemon this run started, in start order
MOUNTED=0    # 1 once this run has mounted anything into the chroot

log() { echo "[start_slurm $(date +%T)] $*"; }
running() { in_chroot_pid "$(readpid "$ROOT$1")"; }   # running CHROOT_PIDFILE
dump_logs() {
    local f
    for f in "$ROOT"/var/log/slurm/*.log "$LOGS"/*.out; do
        if [ -s "$f" ]; then echo "---- tail $f" >&2; tail -n 15 "$f" >&2; fi
    done
}
die() { echo "[start_slurm $(date +%T)] FATAL: $*" >&2; dump_logs; clean_up_after_failure; exit 1; }
cannot_run() {
    echo "[start_slurm $(date +%T)] CANNOT RUN HERE: $*" >&2
    echo "[start_slurm] (exit $EXIT_CANNOT_RUN: this machine cannot host the test cluster;" \
         "set SLURMAPI_SKIP_REAL_SLURM=1 to skip tests/real_slurm)" >&2
    clean_up_after_failure
    exit $EXIT_CANNOT_RUN
}
on_err() {
    local rc=$? line=$1
    trap - ERR
    echo "[start_slurm] FATAL: command failed (rc=$rc) at line $line: $BASH_COMMAND" >&2
    dump_logs
    clean_up_after_failure
    exit 1
}
on_signal() {
    echo "[start_slurm $(date +%T)] FATAL: interrupted by SIG$1" >&2
    clean_up_after_failure
    exit 1
}
# Every failure path ends here: stop what this run started, newest first, and once no daemon is
# left in the chroot, whatever else runs there and the chroot's mounts. Daemons that were already
# up before this run (a cluster being re-started) are left as they were.
clean_up_after_failure() {
    local i entry others=() f
    trap - ERR INT TERM HUP
    set +e
    for ((i = ${#STARTED[@]} - 1; i >= 0; i--)); do
        entry=${STARTED[i]}
        stop_pid "${entry% *}" "${entry#* }"
    done
    for f in "${DAEMON_PIDFILES[@]}"; do running "$f" && others+=("$f"); done
    if [ ${#others[@]} -gt 0 ]; then
        [ ${#STARTED[@]} -gt 0 ] || [ $MOUNTED = 1 ] &&
            log "left running (up before this run): ${others[*]}; stop_slurm.sh stops them"
    elif [ ${#STARTED[@]} -gt 0 ] || [ $MOUNTED = 1 ]; then
        stop_leftovers
        unmount_chroot && log "cleaned up after the failure: nothing of this run is left running or mounted"
        rm -f "$STATE/slurm.env"
    fi
    set -e
}
trap 'on_err $LINENO' ERR
for sig in INT TERM HUP; do trap "on_signal $sig" "$sig"; done

# --------------------------------------------------------------------------
# What the machine must allow.  Checked before anything is built, so a
# machine that cannot run this gets exit 77 and no half-made state.
[ "$(id -u)" = 0 ] || cannot_run "must run as root (it debootstraps a chroot and mounts proc/sys/dev into it)"
case "$ROOT$STATE" in *"'"*) die "SLURM_ROOT/SLURM_STATE_DIR must not contain a single quote";; esac
mkdir -p "$LOGS"
probe_dir=$(mktemp -d "$STATE/.mount-probe.XXXXXX")
if ! mount -t tmpfs -o size=1m tmpfs "$probe_dir" 2>"$LOGS/mount_probe.err"; then
    rmdir "$probe_dir"
    cannot_run "cannot mount (needs CAP_SYS_ADMIN; an unprivileged container cannot): $(cat "$LOGS/mount_probe.err")"
fi
umount "$probe_dir"; rmdir "$probe_dir"

# One start/stop at a time per state dir (two pytest sessions may race here).
exec 9>"$STATE/.lock"
flock -w 300 9 || die "another start/stop_slurm.sh holds $STATE/.lock"

# Each daemon's port must be free unless that daemon is ours and up: checked before anything is built,
# so a port another Slurm holds fails in a second, naming that program.
check_port() {  # name port knob chroot-pidfile
    local holder
    running "$4" && return 0
    holder=$(port_holder "$2")
    [ -z "$holder" ] || die "port $2 for $1 (knob $3) is taken by $holder. Stop that program, or give" \
        "this cluster free ports with SLURM_CTLD_PORT, SLURMD_PORT, SLURMDBD_PORT and SLURM_REST_PORT" \
        "(SLURM_RELEASE=26.05 defaults to 6837-6840, so it runs beside 24.11 on 6817-6820)."
}
check_ports() {
    check_port slurmctld "$CTLD_PORT" SLURM_CTLD_PORT /run/slurm/slurmctld.pid
    check_port slurmd "$SLURMD_PORT" SLURMD_PORT /run/slurm/slurmd.pid
    check_port slurmdbd "$DBD_PORT" SLURMDBD_PORT /run/slurm/slurmdbd.pid
    check_port slurmrestd "$REST_PORT" SLURM_REST_PORT $RUNDIR/slurmrestd.pid
}
check_ports

T_START=$(date +%s.%N)
phase_t0=0
since()       { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
phase_begin() { phase_t0=$(date +%s.%N); }
phase_end()   { printf '%-26s %6s s\n' "$1" "$(since "$phase_t0")" | tee -a "$TIMINGS"; }
echo "# start_slurm.sh $(date -Is)" > "$TIMINGS"

in_root() { chroot "$ROOT" "$@"; }
wait_for() {  # [--pid CHROOT_PIDFILE [--port PORT]] desc timeout_s cmd...  (--pid: fail fast if it dies)
    local pidf="" port="" desc t i holder
    if [ "$1" = --pid ]; then pidf=$2; shift 2; fi
    if [ "$1" = --port ]; then port=$2; shift 2; fi
    desc=$1 t=$2; shift 2
    for ((i = 0; i < t * 4; i++)); do
        if "$@" >/dev/null 2>&1; then log "$desc: ready after ~$((i / 4))s"; return 0; fi
        if [ -n "$pidf" ] && [ $i -ge 8 ] && ! running "$pidf"; then
            holder=""
            [ -z "$port" ] || holder=$(port_holder "$port")
            [ -z "$holder" ] || die "$desc: process exited during start-up: its port $port is taken by $holder"
            die "$desc: process exited during start-up"
        fi
        sleep 0.25
    done
    die "$desc: not ready after ${t}s"
}
# Fetch a small file from the mirror with whatever the host has (debootstrap
# pulls in wget), so "no network" is told apart from "debootstrap broke".
mirror_reachable() {
    local url=$MIRROR/dists/$SUITE/Release
    if command -v wget >/dev/null; then wget -q -T 20 -t 2 -O /dev/null "$url"
    elif command -v curl >/dev/null; then curl -sfL -m 20 -o /dev/null "$url"
    else python3 -c "import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=20).read()" "$url"
    fi
}

# --------------------------------------------------------------------------
phase_begin
if [ ! -e "$ROOT/.stage_debootstrap_ok" ]; then
    if ! command -v debootstrap >/dev/null; then
        log "installing debootstrap on the host (apt-get)"
        apt-get update -q >"$LOGS/host_apt_update.log" 2>&1 ||
            cannot_run "host apt-get update failed: no Debian archive? (see $LOGS/host_apt_update.log)"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
            debian-archive-keyring >"$LOGS/host_apt_install.log" 2>&1 ||
            cannot_run "host apt-get install debootstrap failed (see $LOGS/host_apt_install.log)"
    fi
    [ -e "/usr/share/debootstrap/scripts/$SUITE" ] ||
        cannot_run "this host's debootstrap does not know suite '$SUITE' (Debian 12's does)"
    mirror_reachable || cannot_run "Debian archive $MIRROR unreachable (no network?)"
fi
phase_end "host prerequisites"

# --------------------------------------------------------------------------
phase_begin
if [ ! -e "$ROOT/.stage_debootstrap_ok" ]; then
    if [ -e "$ROOT" ]; then
        # a partial earlier attempt: wipe it, but never through live mounts
        if grep -q " $(readlink -f "$ROOT")/" /proc/mounts; then
            die "$ROOT has mounts but no finished debootstrap; run stop_slurm.sh first"
        fi
        rm -rf --one-file-system "$ROOT"
    fi
    log "debootstrap $SUITE into $ROOT (the slow part, once)"
    ok=0
    for attempt in 1 2 3; do   # mirror hiccups: retry from scratch (nothing is mounted yet)
        if debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$LOGS/debootstrap.log" 2>&1; then
            ok=1; break
        fi
        log "debootstrap attempt $attempt failed: $(tail -1 "$LOGS/debootstrap.log")"
        rm -rf --one-file-system "$ROOT"; sleep $((attempt * 5))
    done
    [ $ok = 1 ] || { tail -20 "$LOGS/debootstrap.log" >&2; die "debootstrap failed 3 times (see $LOGS/debootstrap.log)"; }
    touch "$ROOT/.stage_debootstrap_ok"
fi
chroot "$ROOT" /bin/true 2>"$LOGS/chroot_probe.err" ||
    cannot_run "cannot chroot into $ROOT: $(cat "$LOGS/chroot_probe.err")"
phase_end "debootstrap"

# --------------------------------------------------------------------------
phase_begin
mount_if() {  # target mount-args...
    local tgt=$ROOT/$1; shift
    mountpoint -q "$tgt" && return 0
    mkdir -p "$tgt"
    MOUNTED=1
    mount "$@" "$tgt"
}
mount_if proc    -t proc proc
mount_if sys     -t sysfs -o ro sysfs
mount_if dev     --bind /dev
# systemd hosts use shared propagation: keep chroot mounts from leaking back
mount --make-private "$ROOT/dev"
mount_if dev/pts --bind /dev/pts
mount --make-private "$ROOT/dev/pts"
mount_if dev/shm -t tmpfs -o mode=1777,size=256m tmpfs
mount_if run     -t tmpfs -o mode=0755,size=64m tmpfs
phase_end "mounts"

# --------------------------------------------------------------------------
phase_begin
# python3-minimal: job scripts with a python shebang (a compute node has Python)
PKGS="munge slurmctld slurmd slurmrestd slurm-client slurm-wlm-jwt-plugin slurmdbd mariadb-server curl python3-minimal"
STAMP="$ROOT/.stage_apt_ok_$(echo "$PKGS" | md5sum | cut -c1-8)"
if [ ! -e "$STAMP" ]; then
    mirror_reachable || cannot_run "Debian archive $MIRROR unreachable (no network?)"
    cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
    # never let package scripts start services: we start every daemon ourselves
    printf '#!/bin/sh\nexit 101\n' > "$ROOT/usr/sbin/policy-rc.d"; chmod 755 "$ROOT/usr/sbin/policy-rc.d"
    APT=(env DEBIAN_FRONTEND=noninteractive apt-get -q -o Acquire::Retries=3)
    # sid's Release file is often past its Valid-Until date (the archive is signed; only freshness is waived)
    case "$SUITE" in sid|unstable) APT+=(-o Acquire::Check-Valid-Until=false) ;; esac
    ok=0
    for attempt in 1 2 3; do
        # shellcheck disable=SC2086
        if in_root "${APT[@]}" update >"$LOGS/chroot_apt_update.log" 2>&1 &&
           in_root "${APT[@]}" -o Dpkg::Options::=--force-unsafe-io install -y --no-install-recommends $PKGS \
               >"$LOGS/chroot_apt_install.log" 2>&1; then ok=1; break; fi
        log "chroot apt attempt $attempt failed"; sleep $((attempt * 5))
    done
    [ $ok = 1 ] || { tail -30 "$LOGS"/chroot_apt_*.log >&2; die "chroot apt-get failed 3 times"; }
    in_root apt-get clean
    touch "$STAMP"
fi
SLURM_VERSION=$(in_root slurmctld -V | awk '{print $2}')
case "$SLURM_VERSION" in "$EXPECT_VERSION".*) ;; *) die "expected Slurm $EXPECT_VERSION (SLURM_RELEASE), the chroot ($SUITE) has '$SLURM_VERSION'";; esac
phase_end "chroot packages"

# --------------------------------------------------------------------------
phase_begin
HOSTSHORT=$(hostname -s 2>/dev/null || hostname)
{
    echo "127.0.0.1 localhost"
    echo "::1 localhost ip6-localhost ip6-loopback"
    if [ "$HOSTSHORT" != localhost ]; then echo "127.0.1.1 $HOSTSHORT"; fi
} > "$ROOT/etc/hosts"
in_root getent passwd "$JOB_USER" >/dev/null || in_root useradd -m -u "$JOB_UID" -s /bin/bash "$JOB_USER"
in_root getent passwd slurmrestd >/dev/null || in_root useradd -r -M -d /nonexistent -s /usr/sbin/nologin slurmrestd

any_daemon_running() {
    local f
    for f in "${DAEMON_PIDFILES[@]}"; do running "$f" && return 0; done
    return 1
}
commit_conf() {  # new-file dest: install it, but never change config under running daemons
    if [ -e "$2" ] && cmp -s "$1" "$2"; then rm -f "$1"; return 0; fi
    if any_daemon_running; then
        rm -f "$1"; die "$2 would change while the cluster runs; run stop_slurm.sh first"
    fi
    mv "$1" "$2"
}
MEM_MB=$(awk '/MemTotal/ {m = int($2 / 1024 * 0.5); print (m < 256 ? 256 : m)}' /proc/meminfo)
cat > "$ROOT/etc/slurm/slurm.conf.new" <<EOF
# generated by tests/real_slurm/start_slurm.sh
ClusterName=$CLUSTER
SlurmctldHost=localhost
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups (cgroup.conf: CgroupPlugin=disabled), so processes are tracked by
# /proc scanning; 24.11 has no task/none, so TaskPlugin stays unset.
ProctrackType=proctrack/linuxproc
MpiDefault=none
ReturnToService=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Below 60 s, slurmctld also runs its purge every max(10, MinJobAge) s instead
# of every 60 s, so a finished job leaves /slurm/ MinJobAge..2*MinJobAge s after it ends.
MinJobAge=$MIN_JOB_AGE
KillWait=5
InactiveLimit=0
Waittime=0
MailProg=/bin/true
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
# The node claims $NODE_CPUS CPUs whatever the machine has, so a few test jobs
# (sleeping) run side by side instead of queueing behind each other.
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$NODE_CPUS RealMemory=$MEM_MB State=UNKNOWN
# Preemption (tests/real_slurm/test_scenarios_preemption.py): a job of $PREEMPTOR_PARTITION (the higher
# PriorityTier) takes the node from a job of $PREEMPTIBLE_PARTITION, which Slurm requeues (or ends PREEMPTED
# when the job may not be requeued). Both give each job the whole node (OverSubscribe=EXCLUSIVE), so any
# job of the one needs the other's. $PARTITION neither preempts (its tier is the preemptible one's) nor is
# preempted (PreemptMode=OFF): every other test sees no preemption at all.
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
# A requeued job (preempted, its node failed, scontrol requeue) may start again cred_expire seconds after
# its requeue (default 120); the main scheduler's pass every sched_interval s (default 60) starts it then.
AuthInfo=cred_expire=$CRED_EXPIRE
SchedulerParameters=sched_interval=$SCHED_INTERVAL
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=OFF
PartitionName=$PREEMPTIBLE_PARTITION Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE OverSubscribe=EXCLUSIVE
PartitionName=$PREEMPTOR_PARTITION Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF OverSubscribe=EXCLUSIVE
EOF
commit_conf "$ROOT/etc/slurm/slurm.conf.new" "$ROOT/etc/slurm/slurm.conf"
chmod 0644 "$ROOT/etc/slurm/slurm.conf"
echo "CgroupPlugin=disabled" > "$ROOT/etc/slurm/cgroup.conf"
if [ ! -s "$ROOT/etc/slurm/jwt_hs256.key" ]; then
    dd if=/dev/urandom of="$ROOT/etc/slurm/jwt_hs256.key" bs=32 count=1 status=none
fi
in_root chown slurm:slurm /etc/slurm/jwt_hs256.key
chmod 0600 "$ROOT/etc/slurm/jwt_hs256.key"
cat > "$ROOT/etc/slurm/slurmdbd.conf.new" <<EOF
# generated by tests/real_slurm/start_slurm.sh
AuthType=auth/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=slurm
DebugLevel=info
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurm/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF
commit_conf "$ROOT/etc/slurm/slurmdbd.conf.new" "$ROOT/etc/slurm/slurmdbd.conf"
in_root chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 0600 "$ROOT/etc/slurm/slurmdbd.conf"
cat > "$ROOT/etc/mysql/mariadb.conf.d/99-slurm-ci.cnf" <<'EOF'
[mariadbd]
skip-networking
innodb_buffer_pool_size = 128M
innodb_lock_wait_timeout = 900
max_allowed_packet = 16M
EOF
# MariaDB's socket and data dir as the chroot's MariaDB has them: the server and slurmdbd's client
# library agree on the socket only at the Debian default (slurmdbd.conf has no socket option).
# trixie (10.11): /run/mysqld/mysqld.sock, /var/lib/mysql; sid (11.8): /run/mariadbd/..., /var/lib/mariadb.
DB_SOCKET=$(in_root my_print_defaults client-server | sed -n 's/^--socket=//p' | tail -n 1)
DB_SOCKET=${DB_SOCKET:-/run/mysqld/mysqld.sock}
DB_DATADIR=$(in_root mariadbd --verbose --help 2>/dev/null | awk '$1 == "datadir" { print $2 }')
[ -n "$DB_DATADIR" ] || die "cannot tell mariadbd's data directory (mariadbd --verbose --help)"
# /run is a fresh tmpfs after every mount: recreate the runtime dirs
in_root sh -ec "
  mkdir -p /run/slurm /run/munge $(dirname "$DB_SOCKET") $RUNDIR /var/log/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd
  chown slurm:slurm /run/slurm /var/log/slurm /var/lib/slurm/slurmctld
  chown munge:munge /run/munge; chmod 0755 /run/munge
  chown mysql:mysql $(dirname "$DB_SOCKET")"
phase_end "configure"

# --------------------------------------------------------------------------
# Daemons.  Each starts with </dev/null, a log file as stdout/stderr and the
# lock fd closed: daemons keep the fds they were given, and a caller reading
# our stdout through a pipe (or the next run waiting for the lock) would
# otherwise wait for them forever.
phase_begin
spawn() {  # log-name chroot-pidfile cmd...   (for daemons that fork into the background)
    local name=$1 pidf=$2; shift 2
    STARTED+=("$name $pidf")   # before it runs: a failure while it starts still stops it
    "$@" </dev/null >>"$LOGS/$name.out" 2>&1 9>&-
}
spawn_fg() {  # log-name chroot-pidfile cmd...   (for daemons that stay in the foreground)
    local name=$1 pidf=$2; shift 2
    STARTED+=("$name $pidf")
    # setsid: its own session, so a Ctrl-C in the caller's terminal does not reach it
    setsid "$@" </dev/null >>"$LOGS/$name.out" 2>&1 9>&- &
    echo $! > "$ROOT$pidf"
}
if ! running /run/munge/munged.pid; then
    spawn munged /run/munge/munged.pid in_root setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged
fi
wait_for --pid /run/munge/munged.pid "munged" 20 sh -c "chroot '$ROOT' munge -n | chroot '$ROOT' unmunge"

if ! running $RUNDIR/mariadbd.pid; then
    if [ ! -d "$ROOT$DB_DATADIR/mysql" ]; then
        in_root mariadb-install-db --user=mysql >"$LOGS/mariadb-install-db.log" 2>&1
    fi
    spawn_fg mariadbd $RUNDIR/mariadbd.pid chroot "$ROOT" /usr/sbin/mariadbd --user=mysql
fi
wait_for --pid $RUNDIR/mariadbd.pid "mariadbd" 60 chroot "$ROOT" mariadb-admin --socket=$DB_SOCKET ping
in_root mariadb --socket=$DB_SOCKET -e "
    CREATE DATABASE IF NOT EXISTS slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
    FLUSH PRIVILEGES;"

if ! running /run/slurm/slurmdbd.pid; then
    spawn slurmdbd /run/slurm/slurmdbd.pid in_root slurmdbd
fi
wait_for --pid /run/slurm/slurmdbd.pid --port "$DBD_PORT" "slurmdbd" 90 chroot "$ROOT" sacctmgr -n show cluster
if [ -z "$(in_root sacctmgr -n -P show cluster "$CLUSTER" format=cluster)" ]; then
    # The cluster must exist in the database before slurmctld first starts;
    # state saved against another (or no) database makes slurmctld die with
    # "CLUSTER ID MISMATCH".
    in_root sacctmgr -i add cluster "$CLUSTER" >/dev/null
    rm -f "$ROOT/var/lib/slurm/slurmctld/clustername"
fi
[ -n "$(in_root sacctmgr -n -P show account "$ACCOUNT" format=account)" ] ||
    in_root sacctmgr -i add account "$ACCOUNT" Description=ci Organization=ci Cluster="$CLUSTER" >/dev/null
[ -n "$(in_root sacctmgr -n -P show user "$JOB_USER" format=user)" ] ||
    in_root sacctmgr -i add user "$JOB_USER" Account="$ACCOUNT" Cluster="$CLUSTER" >/dev/null

if ! running /run/slurm/slurmctld.pid; then
    # -i: state saved by a slurmctld that was killed with its host (no assoc_usage file) would make it
    # die with "No Assoc usage file ... to recover"; a test cluster comes back instead.
    spawn slurmctld /run/slurm/slurmctld.pid in_root slurmctld -i
fi
wait_for --pid /run/slurm/slurmctld.pid --port "$CTLD_PORT" "slurmctld" 60 sh -c "chroot '$ROOT' scontrol ping | grep -q 'is UP'"

if ! running /run/slurm/slurmd.pid; then
    # node name 'localhost' whatever the machine is called
    spawn slurmd /run/slurm/slurmd.pid in_root slurmd -N localhost
fi
wait_for --pid /run/slurm/slurmd.pid --port "$SLURMD_PORT" "slurmd/node" 60 \
    sh -c "chroot '$ROOT' sinfo -h -n localhost -o %t | grep -Eqx 'idle|mix|alloc|comp'"

if ! running $RUNDIR/slurmrestd.pid; then
    check_ports   # again: another program may have taken one since the first check
    # slurmrestd refuses to run as root or SlurmUser, hence its own user;
    # SLURM_JWT=daemon makes it pass each client's token on to slurmctld/slurmdbd.
    spawn_fg slurmrestd $RUNDIR/slurmrestd.pid \
        chroot "$ROOT" setpriv --reuid=slurmrestd --regid=slurmrestd --init-groups \
        env SLURM_JWT=daemon slurmrestd -a rest_auth/jwt -s openapi/slurmctld,openapi/slurmdbd \
        -d "$DATA_PARSERS" "$REST_ADDR"
fi
TOKEN=$(in_root scontrol token username="$JOB_USER" lifespan="$TOKEN_LIFESPAN" | sed -n 's/^SLURM_JWT=//p')
[ -n "$TOKEN" ] || die "scontrol token returned nothing"
TOKEN_EXPIRES=$(( $(date +%s) + TOKEN_LIFESPAN ))
REST_URL=http://$REST_ADDR
rest_ok() {
    in_root curl -sf -o /dev/null -H "X-SLURM-USER-NAME: $JOB_USER" -H "X-SLURM-USER-TOKEN: $TOKEN" "$REST_URL$1"
}
wait_for --pid $RUNDIR/slurmrestd.pid --port "$REST_PORT" "slurmrestd" 30 rest_ok "/slurm/$PING_API/ping/"
wait_for "slurmrestd /slurmdb" 30 rest_ok "/slurmdb/$PING_API/ping/"
phase_end "daemons"

# --------------------------------------------------------------------------
# Single-quoted values: the file is both `source`-able and trivially parsed.
umask 077
cat > "$STATE/slurm.env.new" <<EOF
SLURM_REST_URL='$REST_URL'
SLURM_JWT='$TOKEN'
SLURM_JWT_EXPIRES='$TOKEN_EXPIRES'
SLURM_USER='$JOB_USER'
SLURM_ROOT='$(readlink -f "$ROOT")'
SLURM_STATE_DIR='$(readlink -f "$STATE")'
SLURM_PARTITION='$PARTITION'
SLURM_PREEMPTIBLE_PARTITION='$PREEMPTIBLE_PARTITION'
SLURM_PREEMPTOR_PARTITION='$PREEMPTOR_PARTITION'
SLURM_CLUSTER='$CLUSTER'
SLURM_ACCOUNT='$ACCOUNT'
SLURM_RELEASE='$RELEASE'
SLURM_VERSION='$SLURM_VERSION'
SLURM_API_VERSIONS='$DATA_PARSERS'
SLURM_MIN_JOB_AGE='$MIN_JOB_AGE'
SLURM_CTL='$HERE/ctl.sh'
EOF
mv "$STATE/slurm.env.new" "$STATE/slurm.env"
umask 022

printf '%-26s %6s s\n' "TOTAL" "$(since "$T_START")" | tee -a "$TIMINGS"
log "Slurm $SLURM_VERSION up at $REST_URL (user $JOB_USER, data parsers $DATA_PARSERS); env: $STATE/slurm.env"
