#!/bin/bash
# Astraeus against a real NVIDIA GPU machine, end to end, in one pass (about
# 6 minutes): record what the machine says (nvidia-smi with the agent's exact
# arguments, NVML through nvidia-ml-py, the host facts, the kernel log), run
# astraeus-check's quick, copies and burn checks, then a one-machine cluster
# (`astraeus dev`): discovery as `astra machines` / `astra gpus` show it, a
# worker handed one GPU, an acceptance with a short burn-in and its Cluster
# Report, an Xid 48 line in the kernel log fencing the GPU and `astra gpu
# clear-fault` clearing it, and /metrics.
#
# Usage: [STEPS=machine,recordings,checks,allreduce,discovery,cluster] \
#          bench/real_gpu_check.sh OUTDIR [BIN]
#   OUTDIR  receives log.txt (everything printed) and recordings.tar.gz (the
#           recordings, kept as fixtures: test/fixtures/*/README says which)
#   BIN     folder holding astraeus, astra and astraeus-check (default: PATH),
#           and discovery_bench for the discovery step
#   STEPS   the steps to run (default: all of them)
# Runs as root on the machine itself; needs nvidia-smi, and python3 with
# nvidia-ml-py for the NVML recording (skipped without it).
set -u
out=${1:?usage: real_gpu_check.sh OUTDIR [BIN]}
[ $# -ge 2 ] && export PATH="$(readlink -f "$2"):$PATH"
here=$(cd "$(dirname "$0")/.." && pwd)
rec=$(mktemp -d /tmp/astraeus-real-gpu.XXXXXX)
exec > >(tee "$out/log.txt") 2>&1
t0=$(date +%s.%N)

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
want() { [[ ",${STEPS:-machine,recordings,checks,allreduce,discovery,cluster}," == *",$1,"* ]]; }
step() { printf '\n=== [%s s] %s\n' "$(since "$t0")" "$*"; }
# keep NAME TIMEOUT CMD...: run CMD, print its output and keep it as $rec/NAME
keep() {
  local name=$1 limit=$2; shift 2
  echo "\$ $*"
  timeout "$limit" "$@" >"$rec/$name" 2>"$rec/$name.err"
  local rc=$?
  cat "$rec/$name" "$rec/$name.err" | head -c 20000
  echo "(exit $rc)"
  [ -s "$rec/$name.err" ] || rm -f "$rec/$name.err"
  return $rc
}

if want machine; then
step "the machine"
date -u; uname -a; grep PRETTY /etc/os-release; nproc; free -g | head -2
command -v astraeus astra astraeus-check runc nvidia-smi nvidia-ctk dcgmi fio ib_write_bw
ldconfig -p | grep -E 'libnvidia-ml|libcuda\.so|libnccl' | head
for b in astraeus astra astraeus-check; do
  p=$(command -v $b) || continue
  real=$(dirname "$(readlink -f "$p")")/../real/$b
  [ -x "$real" ] && LD_LIBRARY_PATH=$(dirname "$real")/../lib ldd "$real" | grep 'not found'
done

fi

if want recordings; then
step "recordings: nvidia-smi with the agent's arguments, NVML, host facts, kernel log"
F="index,uuid,name,pci.bus_id,driver_version,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,clocks.sm,clocks.mem,fan.speed,ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,ecc.errors.corrected.aggregate.total,ecc.errors.uncorrected.aggregate.total,retired_pages.single_bit_ecc.count,retired_pages.double_bit.count,retired_pages.pending,serial,vbios_version,compute_cap,clocks_throttle_reasons.hw_thermal_slowdown,clocks_throttle_reasons.sw_thermal_slowdown"
keep nvidia-smi-query-gpu.csv 30 nvidia-smi "--query-gpu=$F" --format=csv,noheader,nounits
keep nvidia-smi-remapped-rows.csv 30 nvidia-smi --query-remapped-rows=gpu_uuid,remapped_rows.correctable,remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure --format=csv,noheader,nounits
keep nvidia-smi-nvlink-status.txt 30 nvidia-smi nvlink --status
keep nvidia-smi-topo.txt 30 nvidia-smi topo -m
keep nvidia-smi-q.txt 30 nvidia-smi -q
keep nvidia-smi-q.xml 30 nvidia-smi -q -x >/dev/null
keep nvml.json 60 python3 "$here/test/fixtures/nvml/record_nvml.py"
sh "$here/test/fixtures/hosts/capture-host.sh" "$rec/host" && echo "host facts: $(find "$rec/host" -type f | wc -l) files"
keep kmsg-before.txt 3 cat /dev/kmsg >/dev/null
grep -ci nvrm "$rec/kmsg-before.txt"

fi

if want checks; then
step "astraeus-check quick"
keep check-quick.txt 60 astraeus-check quick
step "astraeus-check copies"
keep check-copies.txt 120 astraeus-check copies
step "astraeus-check burn --duration ${BURN:-45s}"
keep check-burn.txt 600 astraeus-check burn --duration "${BURN:-45s}"
step "astraeus-check explain (thresholds in force)"
keep check-explain.txt 20 astraeus-check explain >/dev/null

fi

if want allreduce; then
step "astraeus-check allreduce: one rank, every GPU, through the real NCCL"
keep check-allreduce.txt 180 astraeus-check allreduce --rank 0 --ranks 1 --root 127.0.0.1:29650 --max-bytes 1073741824
fi

if want discovery; then
step "discovery_bench on the real NVML (a full pass: host facts, NVML, the report)"
keep discovery-bench.txt 120 discovery_bench --passes 200 --root / --nvml-library libnvidia-ml.so.1
fi

if want cluster; then
step "a one-machine cluster: astraeus dev"
rm -rf /var/lib/astraeus/dev
cat >"$rec/controller.yaml" <<EOF
validation:
  check_program: $(command -v astraeus-check)
EOF
astraeus dev --report-interval 2s --controller-config "$rec/controller.yaml" >"$rec/dev.log" 2>&1 &
dev=$!
for i in $(seq 1 60); do
  astra machines 2>/dev/null | grep -q ' Up ' && break
  sleep 1
done
name=$(hostname)
keep astra-machines.txt 20 astra machines
keep astra-machine.json 20 astra machine "$name" -o json >/dev/null
keep astra-gpus.txt 20 astra gpus
keep astra-gpus.json 20 astra gpus -o json >/dev/null
gpu=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][0]["gpu"]["id"])' "$rec/astra-gpus.json" 2>/dev/null)
echo "first GPU: ${gpu:-?}"

step "a worker handed one GPU (runtime process)"
keep run-submit.txt 30 astra run --name smi --gpus 1 --runtime process -- sh -c 'env | grep -E "^(CUDA|NVIDIA|ASTRAEUS)" | sort; nvidia-smi -L; nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader'
for i in $(seq 1 30); do astra runs 2>/dev/null | grep -E '^smi ' | grep -qE 'Succeeded|Failed|Finished|Done' && break; sleep 1; done
keep run-show.txt 20 astra run show smi
keep run-logs.txt 20 astra logs smi

step "acceptance of this machine (burn-in ${BURN:-45s}), and its Cluster Report"
mkdir -p /var/tmp/astraeus-disk
keep validate.txt 330 astra validate --suite acceptance --machine "$name" --burn-in "${BURN:-45s}" --data-dir /var/tmp/astraeus-disk --wait
vid=$(awk '/^validation val-/ { sub(":", "", $2); print $2; exit }' "$rec/validate.txt")
keep validation.txt 20 astra validation "$vid"
keep validation.json 20 astra validation "$vid" -o json >/dev/null
keep report.txt 20 astra report
keep report.json 20 astra report -o json >/dev/null

step "an Xid 48 line in the kernel log fences the GPU; clear-fault clears it"
bus=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gpus"][0]["gpu"]["pci_address"])' "$rec/astra-gpus.json" 2>/dev/null | sed 's/\.[0-7]$//')
line="NVRM: Xid (PCI:${bus}): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
echo "writing to /dev/kmsg: $line"
t_xid=$(date +%s.%N)
echo "<3>$line" >/dev/kmsg || echo "(could not write /dev/kmsg)"
for i in $(seq 1 100); do astra gpus 2>/dev/null | grep -qiE 'fault|fenced' && break; sleep 0.1; done
echo "seen fenced after $(since "$t_xid") s (astra polled every 0.1 s)"
keep gpus-fenced.txt 20 astra gpus
keep gpu-show-fenced.txt 20 astra gpu show "$name" "${gpu:-0}"
keep clear-fault.txt 20 astra gpu clear-fault "$name" "${gpu:-0}"
sleep 5
keep gpus-cleared.txt 20 astra gpus

step "/metrics and the API"
tok=$(cat /var/lib/astraeus/dev/controller-keys/owner-token 2>/dev/null)
keep metrics.txt 20 curl -s http://127.0.0.1:7451/metrics >/dev/null
grep -E '^astraeus_(gpu|machine)' "$rec/metrics.txt" | head -30
keep api-nodes.json 20 curl -s -H "Authorization: Bearer $tok" http://127.0.0.1:7451/api/v1/nodes >/dev/null

step "stop"
kill -TERM $dev; wait $dev; echo "astraeus dev exit $?"
tail -n 60 "$rec/dev.log"
keep kmsg-after.txt 3 cat /dev/kmsg >/dev/null
grep -i nvrm "$rec/kmsg-after.txt" | tail -20
fi
tar -C "$rec" -czf "$out/recordings.tar.gz" . && ls -l "$out"
step "done"
