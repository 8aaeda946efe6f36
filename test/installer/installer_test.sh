#!/bin/bash
# install.sh (installer/install.sh) against a matrix of distributions, with
# no real package manager: fixture os-release files and sysfs trees under a
# root prefix (ASTRAEUS_ROOT), PATH stand-ins (standins/record) that record
# every call to apt-get, apt-cache, dnf, ubuntu-drivers, modprobe, modinfo,
# systemctl, nvidia-smi and curl. Each case asserts the exact commands, what
# the installer says, the questions with and without a terminal, the files
# it writes, idempotence and --uninstall. ctest label: installer.
#   test/installer/installer_test.sh [CASE...]
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
SCRIPT=$SRC/installer/install.sh
WORK=$(mktemp -d "${TMPDIR:-/tmp}/installer-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PASSED=0
FAILED=0
CURRENT=""

fail() {
  echo "FAIL [$CURRENT]: $*"
  FAILED=$((FAILED + 1))
}
ok() { PASSED=$((PASSED + 1)); }

# expect_calls FILE: the recorded calls (systemctl left out) equal FILE's lines.
expect_calls() {
  local want got
  want=$(cat)
  got=$(grep -v '^systemctl ' "$LOG" 2>/dev/null || true)
  if [ "$want" = "$got" ]; then ok; else
    fail "calls differ"; diff <(echo "$want") <(echo "$got") | sed 's/^/    /'
  fi
}
expect_systemctl() {
  local want got
  want=$(cat)
  got=$(grep '^systemctl ' "$LOG" 2>/dev/null || true)
  if [ "$want" = "$got" ]; then ok; else
    fail "systemctl calls differ"; diff <(echo "$want") <(echo "$got") | sed 's/^/    /'
  fi
}
says() {
  if grep -qF -- "$1" "$OUT"; then ok; else fail "output lacks: $1"; sed 's/^/    | /' "$OUT"; fi
}
not_says() {
  if grep -qF -- "$1" "$OUT"; then fail "output has: $1"; else ok; fi
}
has_file() { if [ -e "$ROOT$1" ]; then ok; else fail "no $1"; fi; }
no_file() { if [ -e "$ROOT$1" ]; then fail "$1 exists"; else ok; fi; }
file_is() {
  local got
  got=$(cat "$ROOT$1" 2>/dev/null)
  if [ "$got" = "$2" ]; then ok; else fail "$1 is not as expected"; diff <(echo "$2") <(echo "$got") | sed 's/^/    /'; fi
}
mode_is() {
  local m
  m=$(stat -c %a "$ROOT$1" 2>/dev/null)
  if [ "$m" = "$2" ]; then ok; else fail "$1 has mode $m, not $2"; fi
}
rc_is() { if [ "$RC" = "$1" ]; then ok; else fail "exit $RC, not $1"; sed 's/^/    | /' "$OUT"; fi; }

# A release of a stand-in agent (a shell script), as agent-release lays it
# out: the .deb (usr/bin) and the tarball (bin/, share/ for /usr/local).
make_release() {
  local rel=$WORK/releases d=$WORK/pkg
  mkdir -p "$rel" "$d/deb/DEBIAN" "$d/deb/usr/bin" "$d/deb/usr/share/astraeus" \
           "$d/tgz/bin" "$d/tgz/share/astraeus"
  printf '#!/bin/sh\necho "agent $*"\nexec sleep 600\n' >"$d/deb/usr/bin/astraeus-agent"
  chmod 755 "$d/deb/usr/bin/astraeus-agent"
  cp "$SRC/config/astraeus-agent.service" "$d/deb/usr/share/astraeus/"
  cp "$d/deb/usr/bin/astraeus-agent" "$d/tgz/bin/"
  cp "$SRC/config/astraeus-agent.service" "$d/tgz/share/astraeus/"
  printf 'Package: astraeus-agent\nVersion: 0.1.0\nArchitecture: amd64\nMaintainer: test <t@t>\nDescription: test\n' \
    >"$d/deb/DEBIAN/control"
  dpkg-deb --root-owner-group -b "$d/deb" "$rel/astraeus-agent_0.1.0_amd64.deb" >/dev/null
  tar -czf "$rel/astraeus-agent-0.1.0-linux-amd64.tar.gz" -C "$d/tgz" bin share
  (cd "$rel" && sha256sum astraeus-agent_* astraeus-agent-* >SHA256SUMS)
  RELEASES=file://$rel
}

# fresh NAME OS-RELEASE: a new root prefix with that os-release and no GPU.
fresh() {
  CURRENT=$1
  ROOT=$WORK/$1/root
  LOG=$WORK/$1/calls
  OUT=$WORK/$1/out
  rm -rf "${ROOT%/root}"
  mkdir -p "$ROOT/etc" "$ROOT/sys/bus/pci/devices" "$ROOT/sys/module"
  cp "$HERE/os-release/$2" "$ROOT/etc/os-release"
  : >"$LOG"
  echo 'astj_test_token' >"$WORK/$1/token"
  TOKEN=$WORK/$1/token
}

# gpu VENDOR CLASS: a PCI device under the root's sysfs.
gpu() {
  local d=$ROOT/sys/bus/pci/devices/0000:0$3:00.0
  mkdir -p "$d"
  echo "$1" >"$d/vendor"
  echo "$2" >"$d/class"
}

# install [ENV=V...] -- ARGS: runs the installer without a terminal.
install() {
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  mkdir -p "$WORK/$CURRENT/bin"
  env ASTRAEUS_ROOT="$ROOT" STANDIN_LOG="$LOG" STANDIN_BIN="$WORK/$CURRENT/bin" \
    PATH="$WORK/$CURRENT/bin:$HERE/standins:$PATH" "${envs[@]}" setsid -w sh "$SCRIPT" --apiserver 10.0.0.5 --releases "$RELEASES" "$@" \
    </dev/null >"$OUT" 2>&1
  RC=$?
}

# install_tty INPUT [ENV=V...] -- ARGS: the same in a terminal (script(1)),
# typing INPUT.
install_tty() {
  local input=$1 envs=() q=""
  shift
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  for a in "$@"; do q="$q '$a'"; done
  printf '%b' "$input" | env "${envs[@]}" ASTRAEUS_ROOT="$ROOT" STANDIN_LOG="$LOG" \
    PATH="$HERE/standins:$PATH" \
    script -qec "sh '$SCRIPT' --apiserver 10.0.0.5 --releases '$RELEASES'$q" /dev/null >"$OUT" 2>&1
  RC=$?
}

NV="0x10de"; AMDV="0x1002"; VGA="0x030000"; ACCEL="0x120000"

case_ubuntu_nvidia() {
  for v in 22.04 24.04; do
    fresh "ubuntu-$v-nvidia" "ubuntu-$v"
    gpu $NV $VGA 1
    install -- --token-file "$TOKEN"
    rc_is 0
    expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
apt-get install -y ubuntu-drivers-common
ubuntu-drivers install
modprobe nvidia
X
    says "· this machine has an NVIDIA GPU but no NVIDIA driver"
    says "· installing the NVIDIA driver Ubuntu recommends for this GPU (ubuntu-drivers)"
    says "· the NVIDIA driver is installed; reboot this machine to load it — the worker picks the GPUs up after the reboot (until then, CPU work)"
  done
  # ubuntu-drivers present and the module loads at once: no reboot.
  fresh ubuntu-nvidia-loads ubuntu-24.04
  gpu $NV $VGA 1
  mkdir -p "$WORK/$CURRENT/bin"; ln -sf "$HERE/standins/record" "$WORK/$CURRENT/bin/ubuntu-drivers"
  install STANDIN_LOADS=nvidia -- --token-file "$TOKEN"
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
ubuntu-drivers install
modprobe nvidia
X
  says "· the NVIDIA driver 535.261.03 is loaded and answers"
}

case_debian_nvidia() {
  fresh debian-12-no-terminal debian-12
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN"
  rc_is 0
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
apt-cache show nvidia-driver
X
  says "· not adding Debian's contrib non-free non-free-firmware sections ($ROOT/etc/apt/sources.list.d/astraeus-nvidia.list) for the NVIDIA driver: there is no terminal to ask; rerun with --install-nvidia-driver to allow it, or --no-nvidia-driver"
  says "· the NVIDIA driver was not installed; the worker gets CPU work until it is"
  no_file /etc/apt/sources.list.d/astraeus-nvidia.list

  fresh debian-12-allowed debian-12
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN" --install-nvidia-driver
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
apt-cache show nvidia-driver
apt-get update
apt-get install -y linux-headers-6.1.0-test nvidia-driver firmware-misc-nonfree
modprobe nvidia
X
  file_is /etc/apt/sources.list.d/astraeus-nvidia.list "# Added by the Astraeus installer for the NVIDIA driver (gpus.md).
deb http://deb.debian.org/debian bookworm contrib non-free non-free-firmware
deb http://deb.debian.org/debian bookworm-updates contrib non-free non-free-firmware
deb http://security.debian.org/debian-security bookworm-security contrib non-free non-free-firmware"
  says "· installing the NVIDIA driver from Debian (nvidia-driver)"

  fresh debian-11-allowed debian-11
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN" --install-nvidia-driver
  file_is /etc/apt/sources.list.d/astraeus-nvidia.list "# Added by the Astraeus installer for the NVIDIA driver (gpus.md).
deb http://deb.debian.org/debian bullseye contrib non-free
deb http://deb.debian.org/debian bullseye-updates contrib non-free
deb http://security.debian.org/debian-security bullseye-security contrib non-free"

  # nvidia-driver is available already: no repository, no question.
  fresh debian-12-available debian-12
  gpu $NV $VGA 1
  install STANDIN_NVIDIA_AVAILABLE=1 -- --token-file "$TOKEN"
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
apt-cache show nvidia-driver
apt-get install -y linux-headers-6.1.0-test nvidia-driver firmware-misc-nonfree
modprobe nvidia
X
  no_file /etc/apt/sources.list.d/astraeus-nvidia.list

  # In a terminal: asked; yes adds the repository, no does not.
  fresh debian-12-terminal-yes debian-12
  gpu $NV $VGA 1
  install_tty 'y\n\n' -- --token-file "$TOKEN"
  says "· add Debian's contrib non-free non-free-firmware sections ($ROOT/etc/apt/sources.list.d/astraeus-nvidia.list) for the NVIDIA driver? [y/N]"
  says "· where does this machine keep data (datasets, checkpoints)? a folder, or Enter for none yet:"
  has_file /etc/apt/sources.list.d/astraeus-nvidia.list
  fresh debian-12-terminal-no debian-12
  gpu $NV $VGA 1
  install_tty 'n\n\n' -- --token-file "$TOKEN"
  says "· not adding Debian's contrib non-free non-free-firmware sections ($ROOT/etc/apt/sources.list.d/astraeus-nvidia.list) for the NVIDIA driver (you said no)"
  no_file /etc/apt/sources.list.d/astraeus-nvidia.list
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
apt-cache show nvidia-driver
X
}

case_fedora_rhel_nvidia() {
  fresh fedora-40 fedora-40
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN" --install-nvidia-driver
  rc_is 0
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
dnf install -y https://mirrors.rpmfusion.org/free/fedora/rpmfusion-free-release-40.noarch.rpm https://mirrors.rpmfusion.org/nonfree/fedora/rpmfusion-nonfree-release-40.noarch.rpm
dnf install -y akmod-nvidia xorg-x11-drv-nvidia-cuda
modprobe nvidia
X
  says "the module builds in the background"
  for os in rhel-9 rocky-9 almalinux-8; do
    fresh "$os" "$os"
    gpu $NV $VGA 1
    install -- --token-file "$TOKEN" --install-nvidia-driver
    m=${os##*-}
    expect_calls <<X
modinfo -k 6.1.0-test nvidia
dnf install -y https://dl.fedoraproject.org/pub/epel/epel-release-latest-$m.noarch.rpm
dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel$m/x86_64/cuda-rhel$m.repo
dnf install -y kernel-devel-6.1.0-test kernel-headers-6.1.0-test
dnf module install -y nvidia-driver:latest-dkms
modprobe nvidia
X
    has_file /usr/local/bin/astraeus-agent
  done
  fresh rocky-9-no-terminal rocky-9
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN"
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
X
  says "· not adding EPEL and NVIDIA's CUDA repository (rhel9) for the NVIDIA driver: there is no terminal to ask; rerun with --install-nvidia-driver to allow it, or --no-nvidia-driver"
  fresh arch arch
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN" --install-nvidia-driver
  rc_is 0
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
X
  says "· no official way to install it on Arch Linux: install the NVIDIA driver"
}

case_nvidia_skips() {
  fresh nvidia-no-driver-flag ubuntu-24.04
  gpu $NV $VGA 1
  install -- --token-file "$TOKEN" --no-nvidia-driver
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
X
  says "· --no-nvidia-driver: not installing one"
  fresh nvidia-loaded debian-12
  gpu $NV $VGA 1
  mkdir -p "$ROOT/sys/module/nvidia"; echo 550.90.07 >"$ROOT/sys/module/nvidia/version"
  install -- --token-file "$TOKEN"
  expect_calls </dev/null
  says "· the NVIDIA driver 550.90.07 is loaded"
  fresh nvidia-module-present debian-12
  gpu $NV $VGA 1
  install STANDIN_MODULE=1 STANDIN_LOADS=nvidia -- --token-file "$TOKEN"
  expect_calls <<'X'
modinfo -k 6.1.0-test nvidia
modprobe nvidia
modprobe nvidia
X
  says "· the NVIDIA driver 535.261.03 is loaded and answers"
  fresh no-gpu debian-12
  install -- --token-file "$TOKEN"
  expect_calls </dev/null
}

case_amd() {
  fresh amd-ubuntu-no-terminal ubuntu-22.04
  gpu $AMDV $ACCEL 2
  install -- --token-file "$TOKEN"
  rc_is 0
  expect_calls <<'X'
modprobe amdgpu
apt-get install -y linux-modules-extra-6.1.0-test linux-firmware
modprobe amdgpu
X
  says "· this machine has an AMD GPU that amdgpu does not drive; loading it (modprobe amdgpu)"
  says "· not adding AMD's repository (repo.radeon.com, amdgpu 31.50) for amdgpu-dkms: there is no terminal to ask; rerun with --install-amd-driver to allow it, or --no-amd-driver"
  fresh amd-ubuntu-allowed ubuntu-24.04
  gpu $AMDV $ACCEL 2
  install ASTRAEUS_AMDGPU_VERSION=6.2.4 -- --token-file "$TOKEN" --install-amd-driver
  expect_calls <<X
modprobe amdgpu
apt-get install -y linux-modules-extra-6.1.0-test linux-firmware
modprobe amdgpu
curl -fsSL -o $ROOT/etc/apt/keyrings/astraeus-rocm.asc https://repo.radeon.com/rocm/rocm.gpg.key
apt-get update
apt-get install -y amdgpu-dkms
X
  file_is /etc/apt/sources.list.d/astraeus-amdgpu.list "deb [arch=amd64 signed-by=/etc/apt/keyrings/astraeus-rocm.asc] https://repo.radeon.com/amdgpu/6.2.4/ubuntu noble main"
  says "· amdgpu-dkms is installed; reboot this machine to load it"
  fresh amd-loads debian-12
  gpu $AMDV $VGA 2
  install STANDIN_LOADS=amdgpu -- --token-file "$TOKEN"
  expect_calls <<'X'
modprobe amdgpu
X
  says "· amdgpu drives every AMD GPU"
  fresh amd-debian debian-12
  gpu $AMDV $VGA 2
  install -- --token-file "$TOKEN" --install-amd-driver
  expect_calls <<'X'
modprobe amdgpu
modprobe amdgpu
X
  says "Instinct MI300: 6.8 or newer"
  fresh amd-fedora fedora-40
  gpu $AMDV $VGA 2
  install -- --token-file "$TOKEN"
  expect_calls <<'X'
modprobe amdgpu
dnf install -y linux-firmware
modprobe amdgpu
X
  fresh amd-no-flag ubuntu-22.04
  gpu $AMDV $VGA 2
  install -- --token-file "$TOKEN" --no-amd-driver
  expect_calls </dev/null
}

case_files_and_service() {
  fresh files debian-12
  mkdir -p "$ROOT/sys/class/infiniband/mlx5_0" "$ROOT/sys/class/infiniband/mlx5_1"
  install -- --token-file "$TOKEN" --name gpu-01 --data-dir /mnt/nvme0/astraeus --org Acme \
    --agents drives,credentials,data,edge --network host --no-move --accept
  rc_is 0
  file_is /etc/astraeus/token astj_test_token
  mode_is /etc/astraeus/token 600
  mode_is /etc/astraeus 700
  file_is /etc/astraeus/agent.yaml "# Written by the Astraeus installer (install.sh); a rerun rewrites it.
controller:
  address: \"10.0.0.5\"
  port: 7450
  public_key: \"\"
enrol:
  token_file: \"$ROOT/etc/astraeus/token\"
machine:
  name: \"gpu-01\"
data:
  path: \"$ROOT/var/lib/astraeus/agent\"
workers:
  runtime: auto
data_dir: \"/mnt/nvme0/astraeus\"
validation:
  request_acceptance: true"
  has_file /usr/bin/astraeus-agent
  has_file /mnt/nvme0/astraeus
  if grep -qx "ExecStart=$ROOT/usr/bin/astraeus-agent --config $ROOT/etc/astraeus/agent.yaml" \
       "$ROOT/etc/systemd/system/astraeus-agent.service"; then ok; else fail "unit's ExecStart"; fi
  if grep -qx "Restart=on-failure" "$ROOT/etc/systemd/system/astraeus-agent.service"; then ok; else fail "Restart="; fi
  expect_systemctl <<'X'
systemctl daemon-reload
systemctl is-enabled --quiet astraeus-agent.service
systemctl enable astraeus-agent.service
systemctl restart astraeus-agent.service
X
  says "· this machine has RDMA ports (mlx5_0 mlx5_1): workers keep the host network, which NCCL over RDMA needs"
  says "· --agents drives,credentials,data,edge: only the machine agent exists in this release"
  says "· --accept: acceptance starts by itself once this machine's GPUs are free, 2 minutes after the last machine of its joining batch"
  says "· data location: /mnt/nvme0/astraeus"
  says "· started astraeus-agent.service (restarted on failure)"
  says "· this machine joins as gpu-01"

  # A second identical run changes nothing.
  : >"$LOG"
  touch "$WORK/marker"
  sleep 1
  local t0 t1
  t0=$(date +%s%N)
  install -- --token-file "$TOKEN" --name gpu-01 --data-dir /mnt/nvme0/astraeus --org Acme \
    --agents drives,credentials,data,edge --network host --no-move --accept
  t1=$(date +%s%N)
  rc_is 0
  echo "    (second run: $(( (t1 - t0) / 1000000 )) ms)"
  expect_systemctl <<'X'
systemctl is-enabled --quiet astraeus-agent.service
systemctl is-active --quiet astraeus-agent.service
X
  says "· astraeus-agent is up to date (astraeus-agent_0.1.0_amd64.deb)"
  says "· no change: astraeus-agent.service is running"
  local changed
  changed=$(find "$ROOT" -newer "$WORK/marker" ! -path "*/run/*" -type f)
  if [ -z "$changed" ]; then ok; else fail "the second run changed: $changed"; fi

  # One changed option: the config is rewritten, the service restarted once.
  : >"$LOG"
  install -- --name gpu-01 --data-dir /mnt/nvme0/astraeus --runtime process
  expect_systemctl <<'X'
systemctl is-enabled --quiet astraeus-agent.service
systemctl restart astraeus-agent.service
X
  if grep -q "runtime: process" "$ROOT/etc/astraeus/agent.yaml"; then ok; else fail "runtime not rewritten"; fi

  # Installed: the machine keeps its name and identity.
  mkdir -p "$ROOT/var/lib/astraeus/agent"
  echo gpu-01 >"$ROOT/var/lib/astraeus/agent/name"
  echo key >"$ROOT/var/lib/astraeus/agent/identity.key"
  install -- --name other --runtime process
  rc_is 0
  says "· this machine is gpu-01 already (kept in $ROOT/var/lib/astraeus/agent): keeping that name, not 'other'"
  if grep -q 'name: "gpu-01"' "$ROOT/etc/astraeus/agent.yaml"; then ok; else fail "name not kept"; fi

  # --uninstall: the service and the program go; the identity stays.
  : >"$LOG"
  install -- --uninstall
  rc_is 0
  no_file /etc/systemd/system/astraeus-agent.service
  no_file /usr/bin/astraeus-agent
  no_file /etc/astraeus
  has_file /var/lib/astraeus/agent/identity.key
  has_file /mnt/nvme0/astraeus
  expect_systemctl <<'X'
systemctl disable --now astraeus-agent.service
systemctl daemon-reload
X
  says "· removed astraeus-agent.service"
  says "· kept /var/lib/astraeus/agent: this machine's identity, so a reinstall keeps its name"
  says "· kept the data location /mnt/nvme0/astraeus"
}

case_tarball() {
  fresh tarball fedora-40
  install -- --token-file "$TOKEN"
  rc_is 0
  has_file /usr/local/bin/astraeus-agent
  has_file /usr/local/share/astraeus/astraeus-agent.service
  if grep -qx "ExecStart=$ROOT/usr/local/bin/astraeus-agent --config $ROOT/etc/astraeus/agent.yaml" \
       "$ROOT/etc/systemd/system/astraeus-agent.service"; then ok; else fail "unit's ExecStart"; fi
  says "· no data location: nothing but the agent's own folder is written"
  install -- --uninstall
  no_file /usr/local/bin/astraeus-agent
}

case_refusals() {
  fresh refusals debian-12
  install -- --token-file "$TOKEN" --observe-only
  rc_is 1
  says "· --observe-only is not supported yet"
  install -- --token-file "$TOKEN" --runtime docker
  rc_is 1
  says "· --runtime docker is not supported yet"
  install -- --token-file "$TOKEN" --network bridge
  rc_is 1
  says "· --network bridge is not supported yet: workers use the host network"
  install -- --bogus
  rc_is 1
  says "· unknown option '--bogus'"
  # --help with the script piped into sh, as the seed runs it (curl ... | sh
  # -s -- --help): the options, not nothing (a new-user trial).
  sh -s -- --help <"$SCRIPT" >"$OUT" 2>&1
  RC=$?
  rc_is 0
  says "--token-file FILE      a join token"
  install --
  rc_is 1
  says "· --token-file FILE is missing: this machine has not joined yet"
  install -- --token-file "$WORK/none"
  rc_is 1
  says "cannot read it"
  no_file /etc/systemd/system/astraeus-agent.service
  # A bad checksum is refused.
  cp -r "${RELEASES#file://}" "$WORK/bad-releases"
  echo garbage >>"$WORK/bad-releases/astraeus-agent_0.1.0_amd64.deb"
  local keep=$RELEASES
  RELEASES=file://$WORK/bad-releases
  install -- --token-file "$TOKEN"
  rc_is 1
  says "· astraeus-agent_0.1.0_amd64.deb does not match its checksum"
  no_file /usr/bin/astraeus-agent
  RELEASES=$keep
}

# A copy as the controller serves it: the @@...@@ values filled in.
served_copy() {
  sed -e "s|@@ASTRAEUS_KEY@@|$(printf 'ab%.0s' $(seq 32))|" \
      -e "s|@@ASTRAEUS_ORG_ID@@|$(printf 'ab%.0s' $(seq 16))|" \
      -e "s|@@ASTRAEUS_ORG@@|Acme|" -e "s|@@ASTRAEUS_ARCH@@|$1|" \
      -e "s|@@ASTRAEUS_APISERVER@@|10.0.0.5:7450|" -e "s|@@ASTRAEUS_RELEASES@@|$RELEASES|" \
      -e "s|@@ASTRAEUS_VERSION@@|0.1.0|" -e "s|@@ASTRAEUS_CURL_PIN@@||" "$SCRIPT" >"$WORK/served.sh"
}

case_served() {
  served_copy amd64
  fresh served debian-12
  local id
  id=$(printf 'ab%.0s' $(seq 16))
  env ASTRAEUS_ROOT="$ROOT" STANDIN_LOG="$LOG" PATH="$HERE/standins:$PATH" setsid -w \
    sh "$WORK/served.sh" --token-file "$TOKEN" --org Acme --org-id "$id" </dev/null >"$OUT" 2>&1
  RC=$?
  rc_is 0
  if grep -q "public_key: \"$(printf 'ab%.0s' $(seq 32))\"" "$ROOT/etc/astraeus/agent.yaml"; then ok
  else fail "the served key is not pinned"; fi
  env ASTRAEUS_ROOT="$ROOT" PATH="$HERE/standins:$PATH" setsid -w \
    sh "$WORK/served.sh" --token-file "$TOKEN" --org-id 0123 </dev/null >"$OUT" 2>&1
  RC=$?
  rc_is 1
  says "· --org-id 0123 is not this controller's ($id)"
  env ASTRAEUS_ROOT="$ROOT" PATH="$HERE/standins:$PATH" setsid -w \
    sh "$WORK/served.sh" --token-file "$TOKEN" --org Other </dev/null >"$OUT" 2>&1
  RC=$?
  rc_is 1
  says "· --org 'Other': this controller serves the organisation 'Acme'"
  served_copy arm64
  fresh served-arch debian-12
  env ASTRAEUS_ROOT="$ROOT" PATH="$HERE/standins:$PATH" setsid -w \
    sh "$WORK/served.sh" --token-file "$TOKEN" </dev/null >"$OUT" 2>&1
  RC=$?
  rc_is 1
  says "· this machine is x86_64 (amd64); the controller has agent releases for arm64 only"
}

case_ha_gates() {
  # HA mode: every controller's gate; the agent's config names them all.
  fresh ha-gates debian-12
  install -- --token-file "$TOKEN" --name gpu-02 --no-move \
    --apiserver 10.0.0.1:7450,10.0.0.2,[fd00::3]:7460
  rc_is 0
  if grep -qx '  address: "10.0.0.1:7450,10.0.0.2:7450,\[fd00::3\]:7460"' \
       "$ROOT/etc/astraeus/agent.yaml"; then ok; else fail "agent.yaml's gates: $(grep address "$ROOT/etc/astraeus/agent.yaml")"; fi
  if grep -qx 'apiserver=10.0.0.1:7450,10.0.0.2:7450,\[fd00::3\]:7460' \
       "$ROOT/etc/astraeus/install.conf"; then ok
  else fail "the installer's state does not keep the gates"; fi
}

case_truncated() {
  fresh truncated debian-12
  local n
  n=$(wc -c <"$SCRIPT")
  head -c $((n - 20)) "$SCRIPT" | env ASTRAEUS_ROOT="$ROOT" STANDIN_LOG="$LOG" \
    PATH="$HERE/standins:$PATH" setsid -w sh -s -- --apiserver 10.0.0.5 --releases "$RELEASES" \
    --token-file "$TOKEN" </dev/null >"$OUT" 2>&1 || true
  : # a cut-off download defines functions only
  if [ -z "$(find "$ROOT" -newer "$ROOT/etc/os-release" -mindepth 1 ! -path "$ROOT/sys*")" ] \
     && [ ! -s "$LOG" ]; then ok; else fail "a truncated script did something"; fi
}

make_release
cases=${*:-"ubuntu_nvidia debian_nvidia fedora_rhel_nvidia nvidia_skips amd files_and_service ha_gates tarball refusals served truncated"}
for c in $cases; do "case_$c"; done
if command -v shellcheck >/dev/null 2>&1; then
  CURRENT=shellcheck
  if shellcheck -s sh "$SCRIPT"; then ok; else fail "shellcheck"; fi
fi
echo "installer_test: $PASSED checks passed, $FAILED failed"
[ "$FAILED" = 0 ]
