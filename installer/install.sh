#!/bin/sh
# Astraeus machine installer: installs astraeus-agent as a systemd service
# and joins this machine to the controller that served this script.
#
#   curl -fsSL https://CONTROLLER:7451/api/v1/install.sh | sudo sh -s -- \
#     --apiserver HOST:7450 --token-file ./astraeus-token --org NAME --org-id ID
#
# The controller serves it at GET /api/v1/install.sh with the @@...@@ values
# below filled in (its gate key, address, releases, organisation, version and
# architecture). Everything runs from `main` on the last line, so a download
# cut short executes nothing.
#
# Options: `usage` below (what --help prints; a here-document, so it prints
# when the script is piped into sh too).

SERVED_KEY='@@ASTRAEUS_KEY@@'
SERVED_APISERVER='@@ASTRAEUS_APISERVER@@'
SERVED_RELEASES='@@ASTRAEUS_RELEASES@@'
SERVED_ORG='@@ASTRAEUS_ORG@@'
SERVED_ORG_ID='@@ASTRAEUS_ORG_ID@@'
SERVED_VERSION='@@ASTRAEUS_VERSION@@'
SERVED_ARCH='@@ASTRAEUS_ARCH@@'
SERVED_CURL_PIN='@@ASTRAEUS_CURL_PIN@@'

say() { printf '· %s\n' "$*"; }
fail() { printf '· %s\n' "$*" >&2; exit 1; }

# A served value, or empty when this copy was not served by a controller.
served() {
  case "$1" in @@*@@) printf '' ;; *) printf '%s' "$1" ;; esac
}

# gate_with_port GATE: GATE (an address, HOST, HOST:PORT, [V6]:PORT or a URL)
# as HOST:PORT, with the gate's port 7450 where none is given.
gate_with_port() {
  g=${1#*://}
  g=${g%%/*}
  case "$g" in
    \[*\]:*) ;;
    \[*\]) g="$g:7450" ;;
    *:*:*) g="[$g]:7450" ;;
    *:*) ;;
    *) g="$g:7450" ;;
  esac
  printf '%s' "$g"
}

usage() {
  cat <<'USAGE'
Astraeus machine installer: installs astraeus-agent as a systemd service
and joins this machine to the controller that served this script.

  curl -fsSL https://CONTROLLER:7451/api/v1/install.sh | sudo sh -s -- \
    --apiserver HOST:7450 --token-file ./astraeus-token --org NAME --org-id ID

Options (machines.md "Create one", bring-up-a-gpu-cluster.md step 1):
  --apiserver, --control-plane HOST[:PORT]  the controller's gate (7450);
                         in HA mode every controller's, comma-separated
                         (HOST[:PORT],HOST[:PORT],...): the agent follows
                         whichever leads
  --token-file FILE      a join token (astra tokens create); kept, mode 0600,
                         in /etc/astraeus/token, which the agent reads once
  --releases URL         where the agent's releases are (default: the
                         controller that served this script)
  --org NAME, --org-id ID  checked against the controller's
  --name NAME            this machine's name (default: the host name; a
                         reinstall keeps the name it has)
  --data-dir PATH        the machine's data location (asked in a terminal)
  --agents LIST          only the machine agent exists: said so
  --runtime auto|runc|process   how workers run (docker: not supported yet)
  --network host         workers use the host network (the only mode)
  --no-move              accepted: nothing already on the machine is moved
  --accept               acceptance starts by itself once the machine's GPUs
                         are free, 2 minutes after the last of a joining batch
                         (agent key validation.request_acceptance; kept)
  --observe-only         refused: not supported yet
  --install-nvidia-driver / --no-nvidia-driver
  --install-amd-driver / --no-amd-driver
  --uninstall            remove the service and the program (keeps the
                         machine's identity and its data location)

Environment: ASTRAEUS_ROOT (a root prefix: every file written goes under
it; tests), ASTRAEUS_AMDGPU_VERSION (AMD's packaged driver release, 31.50).
USAGE
}

parse_args() {
  APISERVER=""; TOKEN_FILE=""; RELEASES=""; ORG=""; ORG_ID=""; NAME=""
  DATA_DIR=""; AGENTS=""; RUNTIME=""; NETWORK=""; NO_MOVE=0; ACCEPT=0
  NVIDIA=ask; AMD=ask; UNINSTALL=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --*=*) opt=${1%%=*}; val=${1#*=}; inline=1 ;;
      *) opt=$1; val=""; inline=0 ;;
    esac
    case "$opt" in
      --apiserver|--control-plane|--token-file|--releases|--org|--org-id|--name|\
      --data-dir|--agents|--runtime|--network)
        if [ "$inline" = 0 ]; then
          [ $# -ge 2 ] || fail "$opt needs a value"
          val=$2
          shift
        fi ;;
    esac
    case "$opt" in
      --apiserver|--control-plane) APISERVER=$val ;;
      --token-file) TOKEN_FILE=$val ;;
      --releases) RELEASES=$val ;;
      --org) ORG=$val ;;
      --org-id) ORG_ID=$val ;;
      --name) NAME=$val ;;
      --data-dir) DATA_DIR=$val ;;
      --agents) AGENTS=$val ;;
      --runtime) RUNTIME=$val ;;
      --network) NETWORK=$val ;;
      --no-move) NO_MOVE=1 ;;
      --accept) ACCEPT=1 ;;
      --observe-only)
        fail "--observe-only is not supported yet: this installer installs the full agent; leave the option out" ;;
      --install-nvidia-driver) NVIDIA=yes ;;
      --no-nvidia-driver) NVIDIA=no ;;
      --install-amd-driver) AMD=yes ;;
      --no-amd-driver) AMD=no ;;
      --uninstall) UNINSTALL=1 ;;
      -h|--help) usage; exit 0 ;;
      *) fail "unknown option '$opt' (see --help)" ;;
    esac
    shift
  done
}

# --- where things go ---------------------------------------------------------

set_paths() {
  R=${ASTRAEUS_ROOT:-}
  R=${R%/}
  ETC=$R/etc/astraeus
  CONFIG=$ETC/agent.yaml
  TOKEN=$ETC/token
  STATE=$ETC/install.conf
  AGENT_DIR=$R/var/lib/astraeus/agent
  UNIT=$R/etc/systemd/system/astraeus-agent.service
  SERVICE=astraeus-agent.service
  CHANGED=0
}

# The terminal questions are asked on; none under cloud-init or Ansible.
has_terminal() {
  [ "${ASTRAEUS_NO_TERMINAL:-}" = 1 ] && return 1
  [ -t 1 ] && sh -c ': </dev/tty' 2>/dev/null
}

# ask QUESTION: yes (0) or no (1), read from the terminal; default no.
ask() {
  printf '· %s [y/N] ' "$1" >/dev/tty
  read -r answer </dev/tty || answer=""
  case "$answer" in y|Y|yes|YES|Yes) return 0 ;; *) return 1 ;; esac
}

# consent KIND WHAT: whether a repository may be added for driver KIND
# (nvidia|amd), asking in a terminal, else only with --install-KIND-driver.
consent() {
  kind=$1; what=$2
  if [ "$kind" = nvidia ]; then mode=$NVIDIA; else mode=$AMD; fi
  [ "$mode" = yes ] && return 0
  if has_terminal; then
    ask "add $what?" && return 0
    say "not adding $what (you said no)"
    return 1
  fi
  say "not adding $what: there is no terminal to ask; rerun with --install-$kind-driver to allow it, or --no-$kind-driver"
  return 1
}

# run CMD...: runs a package or system command, saying what failed.
run() {
  "$@" && return 0
  rc=$?
  say "'$*' failed (exit $rc)"
  return $rc
}

# --- the machine -------------------------------------------------------------

detect_os() {
  OS_ID=""; OS_LIKE=""; OS_VERSION=""; OS_CODENAME=""; OS_NAME=""
  f=$R/etc/os-release
  [ -r "$f" ] || f=$R/usr/lib/os-release
  if [ -r "$f" ]; then
    OS_ID=$(os_field ID "$f")
    OS_LIKE=$(os_field ID_LIKE "$f")
    OS_VERSION=$(os_field VERSION_ID "$f")
    OS_CODENAME=$(os_field VERSION_CODENAME "$f")
    OS_NAME=$(os_field PRETTY_NAME "$f")
  fi
  case "$OS_ID" in
    ubuntu) FAMILY=ubuntu ;;
    debian) FAMILY=debian ;;
    fedora) FAMILY=fedora ;;
    rhel|rocky|almalinux|centos) FAMILY=rhel ;;
    *) case " $OS_LIKE " in
         *" ubuntu "*) FAMILY=ubuntu ;;
         *" debian "*) FAMILY=debian ;;
         *" rhel "*|*" centos "*) FAMILY=rhel ;;
         *" fedora "*) FAMILY=fedora ;;
         *) FAMILY=other ;;
       esac ;;
  esac
  MACHINE=$(uname -m)
  case "$MACHINE" in
    x86_64|amd64) ARCH=amd64 ;;
    aarch64|arm64) ARCH=arm64 ;;
    *) ARCH=$MACHINE ;;
  esac
  KERNEL=$(uname -r)
}

# os_field KEY FILE: KEY's value in an os-release file, unquoted.
os_field() {
  sed -n "s/^$1=//p" "$2" | head -n 1 | sed 's/^"\(.*\)"$/\1/; s/^'"'"'\(.*\)'"'"'$/\1/'
}

# pci_gpus VENDOR: the PCI addresses of display or accelerator devices of
# VENDOR (0x10de NVIDIA, 0x1002 AMD).
pci_gpus() {
  for d in "$R"/sys/bus/pci/devices/*; do
    [ -r "$d/vendor" ] || continue
    [ "$(cat "$d/vendor")" = "$1" ] || continue
    case "$(cat "$d/class" 2>/dev/null)" in
      0x03*|0x12*) printf '%s\n' "${d##*/}" ;;
    esac
  done
}

# --- the NVIDIA driver (gpus.md "Install the driver") ---------------------------

nvidia_answers() {
  [ -d "$R/sys/module/nvidia" ] && nvidia-smi -L >/dev/null 2>&1
}

secure_boot_note() {
  if command -v mokutil >/dev/null 2>&1 && mokutil --sb-state 2>/dev/null | grep -qi enabled; then
    say "Secure Boot is on: the module must be signed; the distribution's packages may ask you to enrol a key at the next boot"
  fi
}

nvidia_step() {
  [ -n "$(pci_gpus 0x10de)" ] || return 0
  if [ -d "$R/sys/module/nvidia" ]; then
    say "the NVIDIA driver $(cat "$R/sys/module/nvidia/version" 2>/dev/null) is loaded"
    return 0
  fi
  if modinfo -k "$KERNEL" nvidia >/dev/null 2>&1; then
    say "loading the NVIDIA driver (modprobe nvidia)"
    modprobe nvidia 2>/dev/null || true
    nvidia_result
    return 0
  fi
  say "this machine has an NVIDIA GPU but no NVIDIA driver"
  if [ "$NVIDIA" = no ]; then
    say "--no-nvidia-driver: not installing one; the worker gets CPU work until a driver is installed"
    return 0
  fi
  case "$FAMILY" in
    ubuntu) nvidia_ubuntu ;;
    debian) nvidia_debian ;;
    fedora) nvidia_fedora ;;
    rhel) nvidia_rhel ;;
    *) say "no official way to install it on ${OS_NAME:-this distribution}: install the NVIDIA driver (the kernel module for $KERNEL and nvidia-smi) from your distribution or NVIDIA, then restart $SERVICE"
       return 0 ;;
  esac || { say "the NVIDIA driver was not installed; the worker gets CPU work until it is"; return 0; }
  nvidia_result
}

nvidia_result() {
  modprobe nvidia 2>/dev/null || true
  if nvidia_answers; then
    say "the NVIDIA driver $(cat "$R/sys/module/nvidia/version" 2>/dev/null) is loaded and answers"
    return 0
  fi
  say "the NVIDIA driver is installed; reboot this machine to load it — the worker picks the GPUs up after the reboot (until then, CPU work)"
  secure_boot_note
}

apt_install() {
  DEBIAN_FRONTEND=noninteractive run apt-get install -y "$@"
}

nvidia_ubuntu() {
  if ! command -v ubuntu-drivers >/dev/null 2>&1; then
    say "installing ubuntu-drivers-common"
    apt_install ubuntu-drivers-common || return 1
  fi
  say "installing the NVIDIA driver Ubuntu recommends for this GPU (ubuntu-drivers)"
  run ubuntu-drivers install
}

nvidia_debian() {
  if ! apt-cache show nvidia-driver >/dev/null 2>&1; then
    sections="contrib non-free"
    major=${OS_VERSION%%.*}
    case "$major" in ''|*[!0-9]*) major=12 ;; esac
    [ "$major" -ge 12 ] && sections="$sections non-free-firmware"
    list=$R/etc/apt/sources.list.d/astraeus-nvidia.list
    consent nvidia "Debian's $sections sections ($list) for the NVIDIA driver" || return 1
    mkdir -p "${list%/*}"
    {
      echo "# Added by the Astraeus installer for the NVIDIA driver (gpus.md)."
      echo "deb http://deb.debian.org/debian $OS_CODENAME $sections"
      echo "deb http://deb.debian.org/debian $OS_CODENAME-updates $sections"
      echo "deb http://security.debian.org/debian-security $OS_CODENAME-security $sections"
    } >"$list"
    say "added $sections in $list"
    run apt-get update || return 1
  fi
  say "installing the NVIDIA driver from Debian (nvidia-driver)"
  apt_install "linux-headers-$KERNEL" nvidia-driver firmware-misc-nonfree
}

nvidia_fedora() {
  v=$OS_VERSION
  consent nvidia "RPM Fusion free and nonfree for the NVIDIA driver" || return 1
  run dnf install -y \
    "https://mirrors.rpmfusion.org/free/fedora/rpmfusion-free-release-$v.noarch.rpm" \
    "https://mirrors.rpmfusion.org/nonfree/fedora/rpmfusion-nonfree-release-$v.noarch.rpm" || return 1
  say "installing the NVIDIA driver from RPM Fusion (akmod-nvidia); the module builds in the background"
  run dnf install -y akmod-nvidia xorg-x11-drv-nvidia-cuda
}

nvidia_rhel() {
  major=${OS_VERSION%%.*}
  consent nvidia "EPEL and NVIDIA's CUDA repository (rhel$major) for the NVIDIA driver" || return 1
  run dnf install -y "https://dl.fedoraproject.org/pub/epel/epel-release-latest-$major.noarch.rpm" || return 1
  run dnf config-manager --add-repo \
    "https://developer.download.nvidia.com/compute/cuda/repos/rhel$major/$MACHINE/cuda-rhel$major.repo" || return 1
  run dnf install -y "kernel-devel-$KERNEL" "kernel-headers-$KERNEL" || return 1
  say "installing the NVIDIA driver from NVIDIA's repository"
  if [ "$major" -ge 10 ] 2>/dev/null; then
    run dnf install -y cuda-drivers
  else
    run dnf module install -y nvidia-driver:latest-dkms
  fi
}

# --- the AMD driver ------------------------------------------------------------

# Whether amdgpu drives every AMD GPU and /dev/kfd exists.
amd_driven() {
  for g in $(pci_gpus 0x1002); do
    link=$(readlink "$R/sys/bus/pci/devices/$g/driver" 2>/dev/null) || return 1
    [ "${link##*/}" = amdgpu ] || return 1
  done
  [ -e "$R/dev/kfd" ]
}

amd_step() {
  [ -n "$(pci_gpus 0x1002)" ] || return 0
  amd_driven && { say "amdgpu drives every AMD GPU"; return 0; }
  if [ "$AMD" = no ]; then
    say "this machine has an AMD GPU that amdgpu does not drive; --no-amd-driver: leaving it"
    return 0
  fi
  say "this machine has an AMD GPU that amdgpu does not drive; loading it (modprobe amdgpu)"
  modprobe amdgpu 2>/dev/null || true
  amd_driven && { say "amdgpu drives every AMD GPU"; return 0; }
  case "$FAMILY" in
    ubuntu) say "installing the packages that carry amdgpu and its firmware"
            apt_install "linux-modules-extra-$KERNEL" linux-firmware ;;
    fedora|rhel) say "installing linux-firmware"; run dnf install -y linux-firmware ;;
  esac
  modprobe amdgpu 2>/dev/null || true
  amd_driven && { say "amdgpu drives every AMD GPU"; return 0; }
  if [ "$FAMILY" = ubuntu ] && [ "$ARCH" = amd64 ] \
     && { [ "$OS_VERSION" = 22.04 ] || [ "$OS_VERSION" = 24.04 ]; }; then
    amd_packaged
    return 0
  fi
  say "amdgpu does not drive every AMD GPU: install a kernel new enough for the GPU (Radeon RX 7000 and Radeon PRO W7000: 6.2 or newer; Instinct MI300: 6.8 or newer) with the firmware, or AMD's packaged driver"
}

amd_packaged() {
  v=${ASTRAEUS_AMDGPU_VERSION:-31.50}
  list=$R/etc/apt/sources.list.d/astraeus-amdgpu.list
  consent amd "AMD's repository (repo.radeon.com, amdgpu $v) for amdgpu-dkms" || return 0
  mkdir -p "$R/etc/apt/keyrings" "${list%/*}"
  run curl -fsSL -o "$R/etc/apt/keyrings/astraeus-rocm.asc" https://repo.radeon.com/rocm/rocm.gpg.key || return 0
  echo "deb [arch=amd64 signed-by=/etc/apt/keyrings/astraeus-rocm.asc] https://repo.radeon.com/amdgpu/$v/ubuntu $OS_CODENAME main" >"$list"
  run apt-get update || return 0
  say "installing AMD's packaged driver (amdgpu-dkms $v)"
  apt_install amdgpu-dkms || return 0
  say "amdgpu-dkms is installed; reboot this machine to load it — the worker picks the GPUs up after the reboot (until then, CPU work)"
  secure_boot_note
}

# --- the agent -----------------------------------------------------------------

# fetch URL FILE: downloads, with the controller's certificate pin if served.
fetch() {
  if [ -n "$CURL_PIN" ]; then
    curl -fsSL --insecure --pinnedpubkey "$CURL_PIN" -o "$2" "$1"
  else
    curl -fsSL -o "$2" "$1"
  fi
}

# put FILE MODE: moves FILE.new over FILE when they differ (CHANGED=1).
put() {
  if [ -f "$1" ] && cmp -s "$1.new" "$1"; then
    rm -f "$1.new"
    chmod "$2" "$1"
    return 0
  fi
  chmod "$2" "$1.new"
  mv -f "$1.new" "$1"
  CHANGED=1
}

check_controller() {
  KEY=$(served "$SERVED_KEY")
  CURL_PIN=$(served "$SERVED_CURL_PIN")
  [ -n "$APISERVER" ] || APISERVER=$(served "$SERVED_APISERVER")
  [ -n "$APISERVER" ] || fail "--apiserver HOST:PORT is missing (the controller's gate, e.g. 10.0.0.5:7450)"
  [ -n "$RELEASES" ] || RELEASES=$(served "$SERVED_RELEASES")
  [ -n "$RELEASES" ] || fail "--releases URL is missing (this copy was not served by a controller)"
  RELEASES=${RELEASES%/}
  case "$APISERVER" in
    *,*)
      # HA mode: every controller's gate, each HOST:PORT, in the order given.
      GATE_HOST=""
      for g in $(printf '%s' "$APISERVER" | tr ',' ' '); do
        GATE_HOST="${GATE_HOST:+$GATE_HOST,}$(gate_with_port "$g")"
      done
      GATE_PORT=7450
      GATES=$GATE_HOST ;;
    *)
      gate=$(gate_with_port "$APISERVER")
      GATE_HOST=${gate%:*}
      GATE_HOST=${GATE_HOST#[}
      GATE_HOST=${GATE_HOST%]}
      GATE_PORT=${gate##*:}
      GATES=$gate ;;
  esac
  sorg=$(served "$SERVED_ORG")
  if [ -n "$ORG" ] && [ -n "$sorg" ] && [ "$ORG" != "$sorg" ]; then
    fail "--org '$ORG': this controller serves the organisation '$sorg'"
  fi
  sid=$(served "$SERVED_ORG_ID")
  if [ -n "$ORG_ID" ] && [ -n "$sid" ] && [ "$ORG_ID" != "$sid" ]; then
    fail "--org-id $ORG_ID is not this controller's ($sid): the command was made for another controller, or this script did not come from it"
  fi
  sarch=$(served "$SERVED_ARCH")
  if [ -n "$sarch" ] && [ "$sarch" != "$ARCH" ]; then
    fail "this machine is $MACHINE ($ARCH); the controller has agent releases for $sarch only, so an agent for $ARCH cannot be installed yet"
  fi
}

install_program() {
  TMP=$(mktemp -d "${TMPDIR:-/tmp}/astraeus-install.XXXXXX") || fail "cannot make a temporary folder"
  trap 'rm -rf "$TMP"' EXIT
  fetch "$RELEASES/SHA256SUMS" "$TMP/SHA256SUMS" \
    || fail "cannot download $RELEASES/SHA256SUMS: is the controller reachable, and does it have agent releases?"
  if [ "$FAMILY" = ubuntu ] || [ "$FAMILY" = debian ]; then pat="_$ARCH.deb"; else pat="-linux-$ARCH.tar.gz"; fi
  line=$(grep "astraeus-agent.*$pat\$" "$TMP/SHA256SUMS" | tail -n 1)
  [ -n "$line" ] || fail "the controller has no agent release for $ARCH ($RELEASES/SHA256SUMS lists: $(awk '{print $2}' "$TMP/SHA256SUMS" | tr '\n' ' '))"
  sum=${line%% *}
  file=${line##* }
  file=${file#\*}
  case "$pat" in *.deb) PROGRAM=$R/usr/bin/astraeus-agent; SHARE=$R/usr/share/astraeus ;;
                 *) PROGRAM=$R/usr/local/bin/astraeus-agent; SHARE=$R/usr/local/share/astraeus ;; esac
  mkdir -p "$R/var/lib/astraeus/installer"
  had=$R/var/lib/astraeus/installer/release.sha256
  if [ -x "$PROGRAM" ] && [ -f "$had" ] && [ "$(cat "$had")" = "$sum  $file" ]; then
    say "astraeus-agent is up to date ($file)"
    return 0
  fi
  v=$(served "$SERVED_VERSION")
  say "installing astraeus-agent${v:+ $v} ($file from $RELEASES)"
  fetch "$RELEASES/$file" "$TMP/$file" || fail "cannot download $RELEASES/$file"
  (cd "$TMP" && printf '%s  %s\n' "$sum" "$file" | sha256sum -c --status) \
    || fail "$file does not match its checksum in $RELEASES/SHA256SUMS: not installing it"
  case "$file" in
    *.deb) if [ -n "$R" ]; then
             dpkg-deb -x "$TMP/$file" "$R/" || fail "cannot unpack $file"
           else
             DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall "$TMP/$file" >/dev/null \
               || fail "apt-get could not install $file"
           fi ;;
    *) mkdir -p "$R/usr/local"
       tar -xzf "$TMP/$file" -C "$R/usr/local" || fail "cannot unpack $file" ;;
  esac
  [ -x "$PROGRAM" ] || fail "$file did not contain $PROGRAM"
  printf '%s  %s\n' "$sum" "$file" >"$had"
  CHANGED=1
}

# state KEY: KEY's value in the previous run's install.conf; empty if none.
state() {
  sed -n "s/^$1=//p" "$STATE" 2>/dev/null || true
}

# The name the machine keeps: the one in its agent folder, else --name.
choose_name() {
  kept=$(cat "$AGENT_DIR/name" 2>/dev/null || true)
  if [ -n "$kept" ]; then
    if [ -n "$NAME" ] && [ "$NAME" != "$kept" ]; then
      say "this machine is $kept already (kept in $AGENT_DIR): keeping that name, not '$NAME'"
    fi
    NAME=$kept
  fi
  [ -n "$NAME" ] || NAME=$(state name)
  [ -n "$NAME" ] || NAME=$(uname -n)
  return 0
}

choose_data_dir() {
  [ -n "$DATA_DIR" ] || DATA_DIR=$(state data_dir)
  if [ -z "$DATA_DIR" ] && has_terminal; then
    printf '· where does this machine keep data (datasets, checkpoints)? a folder, or Enter for none yet: ' >/dev/tty
    read -r DATA_DIR </dev/tty || DATA_DIR=""
  fi
  if [ -z "$DATA_DIR" ]; then
    say "no data location: nothing but the agent's own folder is written to this machine's disks (choose one later with --data-dir)"
    return 0
  fi
  case "$DATA_DIR" in /*) ;; *) fail "--data-dir $DATA_DIR: give an absolute path" ;; esac
  if [ ! -d "$R$DATA_DIR" ]; then
    mkdir -p "$R$DATA_DIR" || fail "cannot create the data location $DATA_DIR"
    CHANGED=1
  fi
  say "data location: $DATA_DIR"
}

# A join token is needed until the machine has an identity.
check_token() {
  if [ -n "$TOKEN_FILE" ]; then
    [ -r "$TOKEN_FILE" ] || fail "--token-file $TOKEN_FILE: cannot read it"
  elif [ ! -f "$AGENT_DIR/identity.key" ] && [ ! -s "$TOKEN" ]; then
    fail "--token-file FILE is missing: this machine has not joined yet (astra tokens create mints a token)"
  fi
  return 0
}

write_files() {
  mkdir -p "$ETC" "$AGENT_DIR" "${UNIT%/*}"
  chmod 0700 "$ETC"
  umask 077
  if [ -n "$TOKEN_FILE" ]; then
    tr -d ' \r\n' <"$TOKEN_FILE" >"$TOKEN.new"
    [ -s "$TOKEN.new" ] || { rm -f "$TOKEN.new"; fail "--token-file $TOKEN_FILE is empty"; }
    put "$TOKEN" 0600
  fi
  token_file=""
  [ -s "$TOKEN" ] && token_file=$TOKEN
  pin=$(cat "$AGENT_DIR/controller.pub" 2>/dev/null || true)
  [ -n "$KEY" ] || KEY=$pin
  if [ -n "$pin" ] && [ -n "$KEY" ] && [ "$pin" != "$KEY" ]; then
    fail "this machine is pinned to another controller ($AGENT_DIR/controller.pub); remove $AGENT_DIR to join this one"
  fi
  {
    echo "# Written by the Astraeus installer (install.sh); a rerun rewrites it."
    echo "controller:"
    echo "  address: \"$GATE_HOST\""
    echo "  port: $GATE_PORT"
    echo "  public_key: \"$KEY\""
    echo "enrol:"
    echo "  token_file: \"$token_file\""
    echo "machine:"
    echo "  name: \"$NAME\""
    echo "data:"
    echo "  path: \"$AGENT_DIR\""
    echo "workers:"
    echo "  runtime: ${RUNTIME:-auto}"
    echo "data_dir: \"$DATA_DIR\""
    echo "validation:"
    if [ "$ACCEPT" = 1 ]; then echo "  request_acceptance: true"; else echo "  request_acceptance: false"; fi
  } >"$CONFIG.new"
  put "$CONFIG" 0600
  {
    echo "# The Astraeus installer's choices, read by the next run."
    echo "apiserver=$GATES"
    echo "releases=$RELEASES"
    echo "org=$ORG"
    echo "org_id=$ORG_ID"
    echo "name=$NAME"
    echo "data_dir=$DATA_DIR"
    echo "accept=$ACCEPT"
    echo "program=${PROGRAM#"$R"}"
  } >"$STATE.new"
  put "$STATE" 0600
  umask 022
  tmpl=$SHARE/astraeus-agent.service
  [ -r "$tmpl" ] || fail "$tmpl is missing from the release"
  sed -e "s#/usr/bin/astraeus-agent#$PROGRAM#" -e "s#/etc/astraeus/#$ETC/#" \
      -e "s#/etc/default/#$R/etc/default/#" "$tmpl" >"$UNIT.new"
  before=$CHANGED
  CHANGED=0
  put "$UNIT" 0644
  UNIT_CHANGED=$CHANGED
  CHANGED=$((before | CHANGED))
}

start_service() {
  if [ "$UNIT_CHANGED" = 1 ]; then run systemctl daemon-reload; fi
  systemctl is-enabled --quiet "$SERVICE" 2>/dev/null || run systemctl enable "$SERVICE" >/dev/null
  if [ "$CHANGED" = 1 ] || [ "$UNIT_CHANGED" = 1 ]; then
    run systemctl restart "$SERVICE" || fail "$SERVICE did not start: journalctl -u $SERVICE says why"
    say "started $SERVICE (restarted on failure)"
  elif systemctl is-active --quiet "$SERVICE"; then
    say "no change: $SERVICE is running"
  else
    run systemctl start "$SERVICE" || fail "$SERVICE did not start: journalctl -u $SERVICE says why"
    say "started $SERVICE (restarted on failure)"
  fi
}

notes() {
  if [ -n "$AGENTS" ]; then
    say "--agents $AGENTS: only the machine agent exists in this release; nothing else is installed"
  fi
  case "$RUNTIME" in
    ''|auto|runc|process) ;;
    docker) fail "--runtime docker is not supported yet: workers run with runc (bundled images) or as processes; use --runtime auto, runc or process" ;;
    *) fail "--runtime $RUNTIME: use auto, runc or process" ;;
  esac
  # Without runc, `auto` runs workers as host processes (the .deb recommends
  # runc; a tarball install brings nothing).
  if [ "$RUNTIME" != process ] && ! PATH="$R/usr/sbin:$R/usr/bin:$R/sbin:$R/bin:$PATH" command -v runc >/dev/null 2>&1; then
    say "runc is not installed: workers run as host processes until it is (apt-get install runc, or your distribution's runc package)"
  fi
  case "$NETWORK" in
    ''|host) ;;
    *) fail "--network $NETWORK is not supported yet: workers use the host network" ;;
  esac
  ports=""
  for p in "$R"/sys/class/infiniband/*; do
    [ -e "$p" ] && ports="$ports${p##*/} "
  done
  if [ -n "$ports" ]; then
    say "this machine has RDMA ports (${ports% }): workers keep the host network, which NCCL over RDMA needs"
  else
    say "workers use the host network"
  fi
  if [ "$NO_MOVE" = 1 ]; then say "--no-move: nothing already on this machine is moved"; fi
  # --accept is kept by a rerun without it (the state file remembers it).
  if [ "$ACCEPT" != 1 ] && [ "$(state accept)" = 1 ]; then ACCEPT=1; fi
  if [ "$ACCEPT" = 1 ]; then say "--accept: acceptance starts by itself once this machine's GPUs are free, 2 minutes after the last machine of its joining batch, and never keeps it from work meanwhile"; fi
  return 0
}

uninstall() {
  say "uninstalling astraeus-agent"
  if [ -f "$UNIT" ]; then
    systemctl disable --now "$SERVICE" >/dev/null 2>&1 || true
    rm -f "$UNIT"
    systemctl daemon-reload >/dev/null 2>&1 || true
    say "removed $SERVICE"
  fi
  program=$(state program)
  if [ -z "$R" ] && dpkg-query -W astraeus-agent >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get remove -y astraeus-agent >/dev/null && say "removed the astraeus-agent package"
  elif [ -n "$program" ] && [ -f "$R$program" ]; then
    rm -f "$R$program"
    rm -rf "$R${program%/bin/astraeus-agent}/share/astraeus"
    say "removed $program"
  fi
  data=$(state data_dir)
  rm -rf "$ETC" "$R/var/lib/astraeus/installer"
  say "removed /etc/astraeus (the config and the join token)"
  if [ -d "$AGENT_DIR" ]; then say "kept /var/lib/astraeus/agent: this machine's identity, so a reinstall keeps its name (delete it to forget the machine)"; fi
  if [ -n "$data" ]; then say "kept the data location $data"; fi
  return 0
}

main() {
  set -eu
  parse_args "$@"
  set_paths
  if [ -z "$R" ] && [ "$(id -u)" != 0 ]; then
    fail "run it as root (sudo sh -s -- ...)"
  fi
  detect_os
  if [ "$UNINSTALL" = 1 ]; then
    uninstall
    return 0
  fi
  command -v systemctl >/dev/null 2>&1 || fail "this machine has no systemd (systemctl): the agent runs as a systemd service"
  check_controller
  check_token
  notes
  say "${OS_NAME:-an unknown Linux} on $MACHINE, kernel $KERNEL"
  nvidia_step
  amd_step
  install_program
  choose_name
  choose_data_dir
  write_files
  start_service
  say "this machine joins as ${NAME:-$(uname -n)}; it shows Up on the Machines page when its agent connects"
}

main "$@"
