#!/usr/bin/env bash
# A private one-node SLURM cluster on 127.0.0.1 for the integration test (tests/test_slurm.py).
#
#   .ci/slurm_cluster.sh up   STATE_DIR   install slurm-wlm + munge if missing, write a private
#                                         config under STATE_DIR, start munged, slurmctld, slurmd,
#                                         wait until the node is idle
#   .ci/slurm_cluster.sh down STATE_DIR   cancel the cluster's jobs, stop the daemons by the PIDs
#                                         in their pid files (never by name)
#
# Everything lives under STATE_DIR (an absolute path, traversable by the munge user): its own
# slurm.conf (used through SLURM_CONF / -f), its own munge key and socket, non-default ports
# 16817/16818; a second `up` after `down` starts from a clean state. One file lies outside it:
# snakemake's jobstep plugin removes every SLURM_* variable (SLURM_CONF too) before its `srun`
# inside a job, so that srun only finds the cluster through the default /etc/slurm/slurm.conf.
# `up` writes a copy there, marked on its first line, only where none exists or it is such a copy,
# and `down` removes it again. A slurm.conf that this script did not write is never touched:
# `up` skips instead. /etc/munge is never written.
#
# Exit status of `up`: 0 cluster ready; 77 cannot run here (the reason is the last line on stderr,
# starting with "SKIP:"); anything else is a bug in this script. `up` stops whatever it started
# when it fails part-way (trap).
set -euo pipefail

CTLD_PORT=16817
SLURMD_PORT=16818
SKIP=77

die_skip() {
    echo "SKIP: $*" >&2
    exit "$SKIP"
}
log() { echo "[slurm_cluster] $*" >&2; }

usage() {
    echo "usage: $0 {up|down} STATE_DIR" >&2
    exit 2
}

[ $# -eq 2 ] || usage
CMD=$1
S=$2
case "$S" in /*) ;; *) usage ;; esac
CONF=$S/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
MARK="# Written by .ci/slurm_cluster.sh for"
MUNGE_DIR=$S/munge
SOCK=$MUNGE_DIR/munge.socket
export SLURM_CONF=$CONF

# ---------------------------------------------------------------- stopping (by PID only)
# PID from a pid file, printed only when that process is alive and runs the expected binary.
pid_of() {
    local pidfile=$1 exe=$2 pid
    [ -s "$pidfile" ] || return 0
    pid=$(tr -dc '0-9' <"$pidfile")
    [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
    # /usr/sbin/slurmd is a link (alternatives) to slurmd-wlm: compare resolved paths.
    [ "$(readlink "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$exe")" ] && echo "$pid"
    return 0
}

stop_pid() {
    local name=$1 pidfile=$2 exe=$3 pid i
    pid=$(pid_of "$pidfile" "$exe")
    [ -n "$pid" ] || return 0
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        [ -d "/proc/$pid" ] || return 0
        sleep 0.1
    done
    log "$name (pid $pid) ignored SIGTERM for 10 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

down() {
    [ -d "$S" ] || return 0
    if [ -n "$(pid_of "$S/run/slurmctld.pid" /usr/sbin/slurmctld)" ]; then
        # Jobs of this private cluster only (SLURM_CONF points at it); wait until they are gone
        # so that no job step outlives the daemons.
        timeout 10 scancel --full --quiet --user root 2>/dev/null || true
        for _ in $(seq 1 50); do
            [ -z "$(timeout 5 squeue -h -t RUNNING,COMPLETING,PENDING -o %i 2>/dev/null)" ] && break
            sleep 0.2
        done
    fi
    stop_pid slurmd "$S/run/slurmd.pid" /usr/sbin/slurmd
    stop_pid slurmctld "$S/run/slurmctld.pid" /usr/sbin/slurmctld
    stop_pid munged "$MUNGE_DIR/munged.pid" /usr/sbin/munged
    if [ -f "$ETC_CONF" ] && [ "$(head -n 1 "$ETC_CONF")" = "$MARK $S" ]; then
        rm -f "$ETC_CONF"
    fi
}

if [ "$CMD" = down ]; then
    down
    exit 0
fi
[ "$CMD" = up ] || usage

# ---------------------------------------------------------------- can it run here?
[ "$(id -u)" = 0 ] || die_skip "needs root to install and start slurm-wlm and munge (running as $(id -un))"
for tool in timeout runuser getent; do
    command -v "$tool" >/dev/null || die_skip "'$tool' is not available"
done

have_binaries() {
    local b
    for b in /usr/sbin/slurmctld /usr/sbin/slurmd /usr/sbin/munged /usr/bin/munge /usr/bin/unmunge \
        /usr/bin/sbatch /usr/bin/squeue /usr/bin/sinfo /usr/bin/scancel; do
        [ -x "$b" ] || return 1
    done
    getent passwd munge >/dev/null
}

if ! have_binaries; then
    command -v apt-get >/dev/null || die_skip "slurm-wlm/munge are not installed and there is no apt-get to install them"
    log "installing slurm-wlm and munge with apt-get"
    # Docker images ship /usr/sbin/policy-rc.d (exit 101) so that package scripts start no
    # service; add one for the install where it is missing, and remove only that one.
    policy_added=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        policy_added=1
    fi
    apt_opts=(-o Acquire::Retries=1 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20)
    rc=0
    out=$(timeout 120 apt-get "${apt_opts[@]}" update -q 2>&1) || rc=$?
    if [ $rc -eq 0 ]; then
        out=$(DEBIAN_FRONTEND=noninteractive timeout 300 apt-get "${apt_opts[@]}" install -y -q \
            --no-install-recommends slurm-wlm munge 2>&1) || rc=$?
    fi
    [ -n "$policy_added" ] && rm -f /usr/sbin/policy-rc.d
    if [ $rc -ne 0 ]; then
        echo "$out" | tail -n 15 >&2
        die_skip "apt-get could not install slurm-wlm and munge (exit $rc; no network to the Debian mirror?)"
    fi
    have_binaries || die_skip "apt-get installed slurm-wlm and munge but their daemons are missing"
fi

first_line=$(head -n 1 "$ETC_CONF" 2>/dev/null || true)
if [ -e "$ETC_CONF" ] && [ "${first_line#"$MARK"}" = "$first_line" ]; then
    die_skip "$ETC_CONF exists and was not written by this script: not touching a real cluster's configuration (jobs' nested srun would read it instead of this private cluster's)"
fi

# ---------------------------------------------------------------- private configuration
# Leftovers of an earlier run of this script (same STATE_DIR) are stopped first.
down
trap 'rc=$?; if [ $rc -ne 0 ]; then down; fi' EXIT

rm -rf "$S"
mkdir -p "$S"/{run,log,ctld,spool} "$MUNGE_DIR/private"
# munged insists on a key readable by its user only, in a directory no one else may write, and
# on a socket directory everyone may traverse.
chmod 0755 "$S" "$MUNGE_DIR"
chmod 0700 "$MUNGE_DIR/private"
head -c 1024 /dev/urandom >"$MUNGE_DIR/private/munge.key"
chmod 0400 "$MUNGE_DIR/private/munge.key"
chown -R munge:munge "$MUNGE_DIR"

HOST=$(hostname -s)
# "NodeName=h CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. ThreadsPerCore=.. RealMemory=.."
NODE_HW=$(/usr/sbin/slurmd -C | head -n 1 | sed -e 's/^NodeName=[^ ]* //' -e 's/ RealMemory=[0-9]*//')
case "$NODE_HW" in CPUs=*) ;; *) die_skip "'slurmd -C' printed no CPU line: $NODE_HW" ;; esac
MEM_MIB=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)

cat >"$CONF" <<EOF
$MARK $S
# A private one-node cluster for the integration test (tests/test_slurm.py).
ClusterName=thci
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCK
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/linux
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$S/log/jobcomp.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
ReturnToService=2
MpiDefault=none
MailProg=/bin/true
# The slurm executor of snakemake polls squeue; finished jobs must stay visible there for
# at least 3x its status-check interval.
MinJobAge=300
NodeName=$HOST NodeAddr=127.0.0.1 $NODE_HW RealMemory=$MEM_MIB State=UNKNOWN
PartitionName=main Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

mkdir -p "$(dirname "$ETC_CONF")"
cp "$CONF" "$ETC_CONF"

# ---------------------------------------------------------------- start the daemons
show_logs() {
    local f
    for f in "$MUNGE_DIR/munged.log" "$S/log/slurmctld.log" "$S/log/slurmd.log"; do
        [ -s "$f" ] && { echo "--- tail of $f" >&2; tail -n 15 "$f" >&2; }
    done
    return 0
}
fail_start() {
    show_logs
    die_skip "$*"
}

# Another cluster (or an earlier run whose state dir is gone) on our ports: not ours to stop.
if command -v ss >/dev/null; then
    busy=$(ss -Hltn "( sport = :$CTLD_PORT or sport = :$SLURMD_PORT )" 2>/dev/null || true)
    [ -z "$busy" ] || die_skip "TCP port $CTLD_PORT or $SLURMD_PORT is already in use: $busy"
fi

runuser -u munge -- /usr/sbin/munged --socket="$SOCK" --key-file="$MUNGE_DIR/private/munge.key" \
    --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
    --seed-file="$MUNGE_DIR/private/munged.seed" || fail_start "munged did not start"
for _ in $(seq 1 50); do
    munge -n -S "$SOCK" 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1 && break
    sleep 0.2
done
munge -n -S "$SOCK" | unmunge -S "$SOCK" >/dev/null 2>&1 || fail_start "munged does not answer on $SOCK"

/usr/sbin/slurmctld -f "$CONF" || fail_start "slurmctld did not start"
/usr/sbin/slurmd -f "$CONF" -N "$HOST" || fail_start "slurmd did not start"

state=""
for _ in $(seq 1 150); do
    state=$(timeout 5 sinfo -h -N -o %T 2>/dev/null | head -n 1 || true)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] || fail_start "node $HOST is '${state:-unknown}' after 30 s, not idle"
[ -n "$(pid_of "$S/run/slurmctld.pid" /usr/sbin/slurmctld)" ] || fail_start "slurmctld exited after start"
[ -n "$(pid_of "$S/run/slurmd.pid" /usr/sbin/slurmd)" ] || fail_start "slurmd exited after start"
log "one-node cluster up: node $HOST idle ($NODE_HW RealMemory=$MEM_MIB), SLURM_CONF=$CONF"
