#!/usr/bin/env bash
# Start, stop or inspect a real single-node Slurm cluster for tests and local experiments.
#
#   scripts/slurm_test_cluster.sh start    # install (apt) if missing, configure, start, wait until idle
#   scripts/slurm_test_cluster.sh stop     # scancel every job, then stop slurmd, slurmctld, munged
#   scripts/slurm_test_cluster.sh status   # daemons and `sinfo`
#
# Debian 12 / Ubuntu, as root, without systemd. Slurm 22.05 from the distribution packages.
# Everything the daemons write (state, spool, logs, pid files, fake GPU device nodes) lives under
# one scratch directory, $PBT_SLURM_DIR (default /tmp/pbt-slurm). The configuration is written to
# /etc/slurm/slurm.conf (where every client looks for it) only when that file is absent or was
# written by this script; an existing foreign slurm.conf makes `start` fail.
#
# Environment:
#   PBT_SLURM_DIR   scratch directory                          (default /tmp/pbt-slurm)
#   PBT_SLURM_CPUS  CPUs the node declares (may exceed the real count: config_overrides) (default 8)
#   PBT_SLURM_GPUS  fake GPUs (mknod char devices + gres.conf), 0 for none        (default 4)
#   PBT_SLURM_ACCOUNTING=1  also run MariaDB + slurmdbd so that sacct works (installs mariadb-server
#                   and slurmdbd with apt when missing; ~10 s more to start). submitit, hence
#                   hydra-submitit-launcher, needs sacct to see jobs that were cancelled or killed.
#
# `start` is idempotent: if the cluster already answers `sinfo` with an idle/mixed/allocated node it
# does nothing. `start` clears the job state of any previous cluster run (slurmctld -c).
set -euo pipefail

ROOT="${PBT_SLURM_DIR:-/tmp/pbt-slurm}"
CPUS="${PBT_SLURM_CPUS:-8}"
[[ "$CPUS" =~ ^[1-9][0-9]*$ ]] || { echo "[slurm_test_cluster] ERROR: PBT_SLURM_CPUS=$CPUS is not a positive integer" >&2; exit 1; }
GPUS="${PBT_SLURM_GPUS:-4}"
ACCOUNTING="${PBT_SLURM_ACCOUNTING:-0}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
GRES_CONF="$CONF_DIR/gres.conf"
MARKER="# written by pbt scripts/slurm_test_cluster.sh"
MUNGE_PID=/run/munge/munged.pid
CTLD_PID="$ROOT/run/slurmctld.pid"
SLURMD_PID="$ROOT/run/slurmd.pid"
DBD_CONF="$CONF_DIR/slurmdbd.conf"
DBD_PID="$ROOT/run/slurmdbd.pid"
MYSQL_PID="$ROOT/mysql-run/mysqld.pid"
MYSQL_SOCK="$ROOT/mysql-run/mysqld.sock"
MYSQL_PORT="${PBT_SLURM_MYSQL_PORT:-3307}"

log() { echo "[slurm_test_cluster] $*" >&2; }

# The daemons must not inherit our open files beyond stdio: munged keeps them for its lifetime, so a
# lock held by whoever ran this script (flock LOCK cmd) would stay held until munged stops.
close_inherited_fds() {
    local fd
    for fd in /proc/$$/fd/*; do
        fd="${fd##*/}"
        [[ "$fd" =~ ^[0-9]+$ && "$fd" -gt 2 && "$fd" != 255 ]] && eval "exec $fd>&-" 2>/dev/null || true
    done
}
die() { log "ERROR: $*"; exit 1; }

# A process is alive when /proc/PID/stat exists and its state is not Z (PID 1 here reaps slowly).
alive() {
    local pid="$1" stat state
    [[ -n "$pid" ]] || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    state="${stat##*) }"
    state="${state%% *}"
    [[ -n "$state" && "$state" != "Z" ]]
}

pid_of() { [[ -f "$1" ]] && tr -d '[:space:]' < "$1" || true; }

# Send SIGTERM to the pid in a pid file, wait up to 10 s, then SIGKILL.
stop_pidfile() {
    local name="$1" pidfile="$2" pid i
    pid="$(pid_of "$pidfile")"
    if ! alive "$pid"; then
        rm -f "$pidfile"
        return 0
    fi
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 100); do
        alive "$pid" || break
        sleep 0.1
    done
    if alive "$pid"; then
        log "$name did not exit after SIGTERM, sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$pidfile"
}

install_if_missing() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v sbatch >/dev/null && command -v munged >/dev/null; then
        return 0
    fi
    [[ "$(id -u)" == 0 ]] || die "Slurm is not installed and installing needs root. Run as root or: apt-get install -y slurmctld slurmd slurm-client munge"
    command -v apt-get >/dev/null || die "Slurm is not installed and apt-get is missing. Install slurmctld, slurmd, slurm-client and munge with your package manager."
    log "installing slurmctld slurmd slurm-client munge (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

install_accounting_if_missing() {
    if command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null && command -v mariadb-install-db >/dev/null; then
        return 0
    fi
    { [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; } \
        || die "PBT_SLURM_ACCOUNTING=1 needs slurmdbd and mariadb-server: apt-get install -y slurmdbd mariadb-server"
    log "installing slurmdbd mariadb-server (apt)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmdbd mariadb-server >/dev/null
}

# MariaDB with its own data directory, socket and port under $ROOT, then slurmdbd.
start_accounting() {
    local i
    install_accounting_if_missing
    mkdir -p "$ROOT/mysql" "$ROOT/run" "$ROOT/log"
    if [[ ! -d "$ROOT/mysql/mysql" ]]; then
        log "initialising MariaDB in $ROOT/mysql"
        mariadb-install-db --user=mysql --datadir="$ROOT/mysql" --skip-test-db >"$ROOT/log/mysql-install.log" 2>&1 \
            || die "mariadb-install-db failed; see $ROOT/log/mysql-install.log"
    fi
    mkdir -p "$ROOT/mysql-run"
    chown -R mysql:mysql "$ROOT/mysql" "$ROOT/mysql-run"
    if ! alive "$(pid_of "$MYSQL_PID")"; then
        log "starting MariaDB (127.0.0.1:$MYSQL_PORT)"
        setsid mariadbd --user=mysql --datadir="$ROOT/mysql" --socket="$MYSQL_SOCK" --pid-file="$MYSQL_PID" \
            --port="$MYSQL_PORT" --bind-address=127.0.0.1 --log-error="$ROOT/mysql-run/mysqld.log" </dev/null >/dev/null 2>&1 &
        for i in $(seq 1 150); do
            mariadb --socket="$MYSQL_SOCK" -u root -e "SELECT 1" >/dev/null 2>&1 && break
            sleep 0.2
        done
    fi
    mariadb --socket="$MYSQL_SOCK" -u root -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
        CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'pbt-test-only';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
        || die "MariaDB did not start or refused to create the accounting database; see $ROOT/mysql-run/mysqld.log"
    {
        echo "$MARKER"
        echo "AuthType=auth/munge"
        echo "DbdHost=localhost"
        echo "SlurmUser=root"
        echo "StorageType=accounting_storage/mysql"
        echo "StorageHost=127.0.0.1"
        echo "StoragePort=$MYSQL_PORT"
        echo "StorageUser=slurm"
        echo "StoragePass=pbt-test-only"
        echo "StorageLoc=slurm_acct_db"
        echo "PidFile=$DBD_PID"
        echo "LogFile=$ROOT/log/slurmdbd.log"
    } > "$DBD_CONF"
    chmod 600 "$DBD_CONF"
    if ! alive "$(pid_of "$DBD_PID")"; then
        log "starting slurmdbd"
        slurmdbd || die "slurmdbd failed to start; see $ROOT/log/slurmdbd.log"
        for i in $(seq 1 50); do
            timeout 5 sacctmgr -n list cluster >/dev/null 2>&1 && break
            sleep 0.2
        done
    fi
    if ! timeout 5 sacctmgr -n -P list cluster format=cluster 2>/dev/null | grep -qx pbttest; then
        timeout 10 sacctmgr -i add cluster pbttest >/dev/null || die "sacctmgr add cluster failed; see $ROOT/log/slurmdbd.log"
    fi
}

node_state() { timeout 5 sinfo -h -N -n localhost -o %T 2>/dev/null | head -n1 || true; }

is_up() {
    local state
    state="$(node_state)"
    [[ "$state" == idle* || "$state" == mixed* || "$state" == allocated* ]]
}

write_conf() {
    if [[ -f "$CONF" ]] && ! grep -qF "$MARKER" "$CONF"; then
        die "$CONF exists and was not written by this script. Move it away (this script only manages its own test cluster) and run start again."
    fi
    mkdir -p "$ROOT"/{state,spool,log,run,dev} "$CONF_DIR"
    local node_gres="" gres_types=""
    if [[ "$GPUS" -gt 0 ]]; then
        local i ok=1
        for ((i = 0; i < GPUS; i++)); do
            [[ -c "$ROOT/dev/nvidia$i" ]] || mknod "$ROOT/dev/nvidia$i" c 195 "$i" 2>/dev/null || ok=0
        done
        if [[ "$ok" == 1 ]]; then
            node_gres="Gres=gpu:$GPUS"
            gres_types="GresTypes=gpu"
            {
                echo "$MARKER"
                echo "NodeName=localhost Name=gpu File=$ROOT/dev/nvidia[0-$((GPUS - 1))]"
            } > "$GRES_CONF"
        else
            log "mknod failed: starting without fake GPUs"
            GPUS=0
        fi
    fi
    if [[ "$GPUS" == 0 ]]; then
        rm -f "$GRES_CONF"
    fi
    local accounting="AccountingStorageType=accounting_storage/none"
    if [[ "$ACCOUNTING" == 1 ]]; then
        accounting="AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost"
    fi
    cat > "$CONF" <<EOF
$MARKER
# Single-node test cluster. Scratch directory: $ROOT
ClusterName=pbttest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire also sets how long a requeued job waits before it may start again (default 120 s).
AuthInfo=cred_expire=10
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
ReturnToService=2
MailProg=/bin/true
JobCompType=jobcomp/none
$accounting
JobAcctGatherType=jobacct_gather/none
InactiveLimit=0
KillWait=5
MinJobAge=600
StateSaveLocation=$ROOT/state
SlurmdSpoolDir=$ROOT/spool
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$ROOT/log/slurmctld.log
SlurmdLogFile=$ROOT/log/slurmd.log
$gres_types
NodeName=localhost CPUs=$CPUS RealMemory=1000 $node_gres State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munge() {
    if alive "$(pid_of "$MUNGE_PID")"; then
        return 0
    fi
    [[ -f /etc/munge/munge.key ]] || { log "creating munge key"; mungekey --create --keyfile=/etc/munge/munge.key; chown munge:munge /etc/munge/munge.key; chmod 600 /etc/munge/munge.key; }
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 755 /run/munge
    log "starting munged"
    runuser -u munge -- munged --force
    local i
    for i in $(seq 1 50); do
        [[ -S /run/munge/munge.socket.2 ]] && return 0
        sleep 0.1
    done
    die "munged did not create /run/munge/munge.socket.2; see /var/log/munge/munged.log"
}

cmd_start() {
    local t0=$SECONDS
    if command -v sinfo >/dev/null && alive "$(pid_of "$MUNGE_PID")" && is_up \
        && { [[ "$ACCOUNTING" != 1 ]] || alive "$(pid_of "$DBD_PID")"; }; then
        log "cluster already up: $(node_state)"
        return 0
    fi
    install_if_missing
    # A half-started cluster (e.g. munged died) is restarted from scratch.
    stop_pidfile slurmd "$SLURMD_PID"
    stop_pidfile slurmctld "$CTLD_PID"
    write_conf
    start_munge
    if [[ "$ACCOUNTING" == 1 ]]; then
        start_accounting
    else
        stop_pidfile slurmdbd "$DBD_PID"
    fi
    log "starting slurmctld and slurmd (CPUs=$CPUS, fake GPUs=$GPUS, scratch $ROOT)"
    slurmctld -c || die "slurmctld failed to start; see $ROOT/log/slurmctld.log"
    slurmd -N localhost || die "slurmd failed to start; see $ROOT/log/slurmd.log"
    local i
    for i in $(seq 1 60); do
        if is_up; then
            log "cluster up in $((SECONDS - t0)) s: node localhost $(node_state)"
            return 0
        fi
        sleep 0.5
    done
    log "sinfo: $(timeout 5 sinfo 2>&1 || true)"
    die "node did not become idle within 30 s; see $ROOT/log/slurmctld.log and $ROOT/log/slurmd.log"
}

cmd_stop() {
    if alive "$(pid_of "$MUNGE_PID")" && alive "$(pid_of "$CTLD_PID")"; then
        local ids i
        ids="$(timeout 5 squeue -h -o %A 2>/dev/null | tr '\n' ' ' || true)"
        if [[ -n "${ids// /}" ]]; then
            log "cancelling jobs: $ids"
            # shellcheck disable=SC2086
            timeout 10 scancel $ids 2>/dev/null || true
            for i in $(seq 1 150); do
                [[ -z "$(timeout 5 squeue -h -o %A 2>/dev/null || true)" ]] && break
                sleep 0.1
            done
        fi
    fi
    stop_pidfile slurmd "$SLURMD_PID"
    stop_pidfile slurmctld "$CTLD_PID"
    stop_pidfile slurmdbd "$DBD_PID"
    stop_pidfile mariadbd "$MYSQL_PID"
    stop_pidfile munged "$MUNGE_PID"
    log "stopped"
}

cmd_status() {
    local name pidfile pid rc=0
    for name in munged slurmctld slurmd; do
        case "$name" in
            munged) pidfile="$MUNGE_PID" ;;
            slurmctld) pidfile="$CTLD_PID" ;;
            slurmd) pidfile="$SLURMD_PID" ;;
        esac
        pid="$(pid_of "$pidfile")"
        if alive "$pid"; then echo "$name: running (pid $pid)"; else echo "$name: not running"; rc=1; fi
    done
    for name in slurmdbd mariadbd; do
        case "$name" in
            slurmdbd) pidfile="$DBD_PID" ;;
            mariadbd) pidfile="$MYSQL_PID" ;;
        esac
        pid="$(pid_of "$pidfile")"
        if alive "$pid"; then echo "$name: running (pid $pid)"; fi
    done
    if [[ "$rc" == 0 ]]; then
        timeout 5 sinfo || rc=1
    fi
    return "$rc"
}

case "${1:-}" in
    start) close_inherited_fds; cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    restart) close_inherited_fds; cmd_stop; cmd_start ;;
    *) echo "usage: $0 start|stop|status|restart" >&2; exit 2 ;;
esac
