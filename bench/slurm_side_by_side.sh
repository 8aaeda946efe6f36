#!/usr/bin/env bash
# Slurm side by side with Astraeus's scheduler (opt-in; not part of CI).
#
#   bench/slurm_side_by_side.sh [--bench PATH] [--nodes N] [--jobs N]
#                               [--port BASE] [--keep-temp]
#
# Starts Debian's slurmctld and one slurmd per fake node (`slurmd -N name`,
# on loopback ports BASE+1.., Gres=gpu:8, SlurmdParameters=config_overrides,
# AuthType=auth/none, select/cons_tres), all from a slurm.conf in a fresh
# temporary folder (nothing is written to the repository or /etc/slurm).
# Installs slurmctld, slurmd and slurm-client with apt when missing (needs
# root). Then:
#   Ours, first (before any Slurm process runs): scheduler_actor_bench
#     --machines N --slurm-shape JOBS: the same nodes (8 GPUs each) and the
#     same job sequence through the scheduler actor with its synced group
#     commit (the fsync on a thread of its own, as the controller runs it),
#     the store in this run's temporary folder (the real disk), then again
#     with the store on /dev/shm (the actor without the disk); then, as
#     Slurm's side is measured, every job at once on a warm actor (a burst
#     placed and deleted first), with the store on the disk.
#   Slurm: submits --jobs batch jobs held (job i asks for 4 GPUs when
#     i % 5 == 4, else 1 GPU: `sbatch -H --gres=gpu:K --wrap 'sleep 3600'`),
#     releases them all at once, and times until squeue shows all RUNNING;
#     also prints sdiag's scheduler-cycle figures (the scheduler's own time).
#     SchedulerParameters are tuned for a fast start (bf_interval=1,
#     sched_interval=1, default_queue_depth=100000); Slurm's defaults
#     (bf_interval=30) would be slower.
# A run takes about a minute (200 nodes, 750 jobs); the real slurmd start
# real `sleep` jobs (750 processes plus their slurmstepd, briefly).
# Prints both rates and the ratio (target: at least 100x). Stops exactly the
# processes it started, by pid (trap on exit), and any process of its jobs
# (found by the SLURM_CONF of this run in their environment).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bench=""
nodes=200
jobs=750
base_port=27000
keep_temp=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    --port) base_port=$2; shift 2 ;;
    --keep-temp) keep_temp=1; shift ;;
    *) echo "usage: $0 [--bench PATH] [--nodes N] [--jobs N] [--port BASE] [--keep-temp]" >&2
       exit 2 ;;
  esac
done
if [ -z "$bench" ]; then
  for b in "${ASTRAEUS_BUILD_DIR:-}/bench/scheduler_actor_bench" \
           /work/build-bench/bench/scheduler_actor_bench \
           "$here/../build/bench/scheduler_actor_bench"; do
    if [ -x "$b" ]; then bench=$b; break; fi
  done
fi
if [ -z "$bench" ] || [ ! -x "$bench" ]; then
  echo "scheduler_actor_bench not found: build it and pass --bench PATH" >&2
  exit 2
fi

# -- Slurm binaries ----------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
   || ! command -v sbatch >/dev/null; then
  if [ "$(id -u)" != 0 ]; then
    echo "Slurm is not installed; run as root to install it with apt" >&2
    exit 2
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    slurmctld slurmd slurm-client
fi
# With the emulator package installed, the plain names may point at the
# emulator: call the real daemons by their -wlm names when they exist.
slurmctld_bin=$(command -v slurmctld-wlm || command -v slurmctld)
slurmd_bin=$(command -v slurmd-wlm || command -v slurmd)
echo "slurm: $("$slurmctld_bin" -V) ($slurmctld_bin, $slurmd_bin)"

# -- ports -----------------------------------------------------------------------
ctld_port=$base_port
if ss -ltnH | awk '{print $4}' | grep -Eq ":($(seq -s '|' "$base_port" $((base_port + nodes))))\$"; then
  echo "a port in $base_port..$((base_port + nodes)) is in use; pass --port BASE" >&2
  exit 2
fi

# -- temporary folder, processes, cleanup ----------------------------------
tmp=$(mktemp -d "${TMPDIR:-/tmp}/slurm-side-by-side.XXXXXX")
pids=()
cleanup() {
  local rc=$?
  set +e
  if [ -n "${SLURM_CONF:-}" ] && [ "${#pids[@]}" -gt 0 ]; then
    scancel --quiet --user=root >/dev/null 2>&1
    for _ in $(seq 1 50); do
      [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break
      sleep 0.2
    done
  fi
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for _ in $(seq 1 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.2
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  # Job steps (slurmstepd, sleep) left by this run: exactly those whose
  # environment names this run's slurm.conf.
  for e in /proc/[0-9]*/environ; do
    p=${e#/proc/}; p=${p%/environ}
    [ "$p" = $$ ] && continue
    if { tr "\0" "\n" <"$e"; } 2>/dev/null | grep -qx "SLURM_CONF=$tmp/slurm.conf"; then
      kill -KILL "$p" 2>/dev/null
    fi
  done
  if [ $keep_temp = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# -- ours (first, so that Slurm's daemons and jobs do not share the CPUs) ----
# Twice: the store on the temporary folder's disk (the real figure), and on
# /dev/shm (tmpfs: fdatasync costs nothing), which shows what the actor
# costs without the disk. Both as this comparison has always measured ours
# (the first burst after start, 64 requests in flight): the figure the
# issue-14 bar (>= 200x) is judged on. Then once more on the disk as
# Slurm's side is measured: every job pending at once (`--window JOBS`, as
# Slurm's held jobs are released at once) on a warm actor (`--warmup JOBS`:
# the same burst placed and deleted first, as Slurm's controller has its
# nodes registered and its jobs submitted before the release).
ours_rate() { # label, store base dir, extra options...
  local label=$1 dir=$2 line
  shift 2
  line=$("$bench" --machines "$nodes" --slurm-shape "$jobs" --serial-ops 0 --gang-ops 0 \
           --dir "$dir" "$@" | tee "$tmp/ours-$label.txt" | grep '^slurm-shape:')
  sed "s/^/  ours ($label): /" "$tmp/ours-$label.txt" >&2
  echo "$line" | awk '{for (i=1;i<=NF;i++) if ($i=="placements/s") print $(i-1)}'
}
ours_disk=$(ours_rate disk "$tmp")
ours_shm=""
[ -d /dev/shm ] && ours_shm=$(ours_rate tmpfs /dev/shm)
ours_alike=$(ours_rate "disk, all at once, warm" "$tmp" --window "$jobs" --warmup "$jobs")

mkdir -p "$tmp"/{state,spool,log,run,dev}
for g in 0 1 2 3 4 5 6 7; do : >"$tmp/dev/gpu$g"; done
for i in $(seq 1 "$nodes"); do mkdir -p "$tmp/spool/$(printf 'sn%03d' "$i")"; done
last=$(printf 'sn%03d' "$nodes")
node_list="sn[001-$(printf '%03d' "$nodes")]"
cat >"$tmp/slurm.conf" <<EOF
ClusterName=sidebyside
SlurmctldHost=$(hostname -s)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool/%n
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd-%n.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd-%n.log
SlurmctldDebug=error
SlurmdDebug=error
ReturnToService=2
SlurmdParameters=config_overrides
SlurmdTimeout=600
MessageTimeout=60
MaxJobCount=100000
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=default_queue_depth=100000,sched_interval=1,bf_interval=1,bf_continue
NodeName=$node_list NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((base_port + 1))-$((base_port + nodes))] CPUs=64 Boards=1 SocketsPerBoard=2 CoresPerSocket=32 ThreadsPerCore=1 Gres=gpu:8 State=UNKNOWN
PartitionName=bench Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$tmp/gres.conf" <<EOF
NodeName=$node_list Name=gpu File=$tmp/dev/gpu[0-7]
EOF
export SLURM_CONF=$tmp/slurm.conf

"$slurmctld_bin" -D -c -f "$SLURM_CONF" >"$tmp/log/slurmctld.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do scontrol ping >/dev/null 2>&1 && break; sleep 0.1; done
scontrol ping | grep -q UP || { echo "slurmctld did not come up:" >&2; tail "$tmp/log/slurmctld"* >&2; exit 1; }
for i in $(seq 1 "$nodes"); do
  n=$(printf 'sn%03d' "$i")
  "$slurmd_bin" -D -N "$n" -f "$SLURM_CONF" >"$tmp/log/slurmd-$n.out" 2>&1 &
  pids+=($!)
done
echo "started slurmctld and $nodes slurmd (pids ${pids[0]}..${pids[-1]}), conf $SLURM_CONF"

idle=0
for _ in $(seq 1 600); do
  idle=$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
  [ "$idle" -ge "$nodes" ] && break
  sleep 0.2
done
if [ "$idle" -lt "$nodes" ]; then
  echo "only $idle of $nodes nodes idle:" >&2
  sinfo -N -o '%N %T %E' | sort | uniq -c -f1 | head >&2
  exit 1
fi
gres=$(scontrol show node "$last" | grep -o 'Gres=[^ ]*' | head -1)
if [ "$gres" != "Gres=gpu:8" ]; then
  echo "GPU count did not register ($gres): scontrol update nodename=$node_list gres=gpu:8"
  scontrol update nodename="$node_list" gres=gpu:8
fi
echo "$nodes nodes idle; $(scontrol show node "$last" | grep -o 'Gres=[^ ]*' | head -1)"

# -- Slurm: submit held, release all, wait until all RUNNING ------------------
t0=$(date +%s.%N)
ids=()
for i in $(seq 0 $((jobs - 1))); do
  k=1; [ $((i % 5)) = 4 ] && k=4
  ids+=("$(sbatch --parsable -H -J "job-$i" -n1 -c1 --gres="gpu:$k" -o /dev/null -e /dev/null \
           --wrap 'sleep 3600')")
done
t1=$(date +%s.%N)
echo "submitted $jobs held jobs in $(echo "$t1 - $t0" | bc) s"
sdiag -r >/dev/null
start=$(date +%s.%N)
scontrol release "$(IFS=,; echo "${ids[*]}")"
running=0
for _ in $(seq 1 6000); do
  running=$(squeue -h -t R -o %i | wc -l)
  [ "$running" -ge "$jobs" ] && break
  sleep 0.05
done
end=$(date +%s.%N)
slurm_s=$(echo "$end - $start" | bc -l)
if [ "$running" -lt "$jobs" ]; then
  echo "Slurm: only $running of $jobs jobs running after $slurm_s s" >&2
fi
slurm_rate=$(echo "$running / $slurm_s" | bc -l)
printf 'Slurm: %d of %d jobs RUNNING %.3f s after release: %.1f placements/s (wall clock)\n' \
  "$running" "$jobs" "$slurm_s" "$slurm_rate"
sdiag >"$tmp/sdiag.txt"
grep -E 'Jobs (submitted|started)|^Main schedule|^Backfilling|Total (cycles|backfilled jobs)|Mean cycle|Last cycle:|Max cycle' \
  "$tmp/sdiag.txt" | sed 's/^/  sdiag: /'
# The scheduler's own time: main + backfill cycles (µs).
sched_us=$(awk '
  /^Main schedule statistics/ {s="main"} /^Backfilling stats/ {s="bf"}
  /Total cycles:/ {c[s]=$3} /Mean cycle:/ {m[s]=$3}
  END {print c["main"]*m["main"] + c["bf"]*m["bf"]}' "$tmp/sdiag.txt")
started=$(awk '/Jobs started:/ {print $3; exit}' "$tmp/sdiag.txt")
if [ "${sched_us:-0}" != 0 ]; then
  printf 'Slurm: %s jobs started in %.1f ms of scheduler cycles (sdiag): %.1f placements/s of scheduler time\n' \
    "$started" "$(echo "$sched_us / 1000" | bc -l)" "$(echo "$started / ($sched_us / 1000000)" | bc -l)"
fi


# -- both --------------------------------------------------------------------------
printf 'Astraeus: %s placements/s through the scheduler actor, store on %s (sync writes)\n' \
  "$ours_disk" "$(df --output=source,fstype "$tmp" | tail -1 | tr -s ' ')"
[ -n "$ours_shm" ] && printf 'Astraeus: %s placements/s with the store on /dev/shm (tmpfs)\n' "$ours_shm"
printf 'Slurm:    %.1f placements/s (release -> all RUNNING)\n' "$slurm_rate"
printf 'ratio (Astraeus / Slurm, wall clock): %.1fx with the disk' "$(echo "$ours_disk / $slurm_rate" | bc -l)"
[ -n "$ours_shm" ] && printf ', %.1fx on tmpfs' "$(echo "$ours_shm / $slurm_rate" | bc -l)"
printf ' (target >= 100x)\n'
printf 'like for like (all %s jobs pending at once, a warm actor, the disk): Astraeus %s placements/s, %.1fx\n' \
  "$jobs" "$ours_alike" "$(echo "$ours_alike / $slurm_rate" | bc -l)"
