#!/bin/bash
# End to end on this machine (issue 20): a controller on loopback serving
# install.sh and the agent's releases (built by `ninja agent-release`),
#   1. `curl …/install.sh | sh -s -- --token-file …` with a root prefix
#      (ASTRAEUS_ROOT) and the systemctl stand-in, which starts the agent in
#      the background: the agent enrols, the machine is Up; a second run
#      changes nothing; --uninstall stops it;
#   2. the seed's Ansible playbook (astraeus-machines.yml), its variables
#      pointing at the controller, run by ansible-playbook against localhost
#      (connection local) in a private mount namespace whose /etc, /root,
#      /usr, /var and /mnt are overlays (so its real paths, /etc/astraeus/token
#      and /root/astraeus-token, and the real .deb install touch nothing
#      outside the test), systemctl again the stand-in: the 201, the token
#      copied, the installer run, the token file removed, the machine Up in
#      pool h100; a second run changes nothing.
#   test/installer/end_to_end_test.sh BUILD_DIR [curl|ansible]...
set -u
BUILD=$(cd "${1:?usage: end_to_end_test.sh BUILD_DIR}" && pwd)
shift
PARTS=${*:-curl ansible}
HERE=$(cd "$(dirname "$0")" && pwd)
RELEASES_DIR=$BUILD/share/astraeus/releases
W=$(mktemp -d "${TMPDIR:-/tmp}/installer-e2e.XXXXXX")
PASSED=0; FAILED=0
CTL_PID=""
cleanup() {
  [ -n "$CTL_PID" ] && kill "$CTL_PID" 2>/dev/null && wait "$CTL_PID" 2>/dev/null
  rm -rf "$W"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; FAILED=$((FAILED + 1)); }
ok() { PASSED=$((PASSED + 1)); }
check() { if eval "$2"; then ok; else fail "$1"; fi; }

[ -s "$RELEASES_DIR/SHA256SUMS" ] || { echo "no releases in $RELEASES_DIR: run ninja -C $BUILD agent-release"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
GATE=$(free_port); API=$(free_port)
URL=http://127.0.0.1:$API
"$BUILD/bin/astraeus-controller" --listen 127.0.0.1 --port "$GATE" --data-dir "$W/store" \
  --set api.listen=127.0.0.1:$API --set api.plain_http=true --set heartbeat.lapse=5s \
  --set heartbeat.report_interval=1s --set "releases.dir=$RELEASES_DIR" >"$W/controller.log" 2>&1 &
CTL_PID=$!
for _ in $(seq 100); do curl -fsS "$URL/api/v1/openapi.json" >/dev/null 2>&1 && break; sleep 0.1; done
OWNER=$(cat "$W/store-keys/owner-token")
API_PREFIX=$URL/api/v1/orgs/default/clusters/default
KEY=$(head -c 64 "$W/store-keys/gate.pub")
ORG_ID=${KEY:0:32}

# machine_up NAME: waits (10 s at most) for NAME to be Up; its JSON in $W/machine.json.
machine_up() {
  for _ in $(seq 100); do
    curl -fsS -H "Authorization: Bearer $OWNER" "$API_PREFIX/machines/$1" >"$W/machine.json" 2>/dev/null \
      && grep -q '"state": *"Up"' "$W/machine.json" && return 0
    sleep 0.1
  done
  cat "$W/machine.json" 2>/dev/null
  return 1
}

part_curl() {
  echo "-- curl | sh with a root prefix"
  check "install.sh is served with the gate key" \
    "curl -fsS $URL/api/v1/install.sh | grep -q \"^SERVED_KEY='$KEY'\""
  check "SHA256SUMS is served" "curl -fsS $URL/releases/SHA256SUMS | grep -q astraeus-agent_"
  check "an unknown release file is a 404" \
    "[ \"\$(curl -s -o /dev/null -w '%{http_code}' $URL/releases/nope.deb)\" = 404 ]"
  curl -fsS -X POST "$API_PREFIX/enrollment-tokens" -H "Authorization: Bearer $OWNER" \
    -H 'content-type: application/json' -d '{"labels": {"pool": "a100"}, "ttl_seconds": 3600}' \
    >"$W/token.json"
  check "the API's install command runs install.sh" \
    "grep -q 'curl -fsSL $URL/api/v1/install.sh | sudo sh -s -- --apiserver 127.0.0.1:$GATE --token-file ./astraeus-token --releases $URL/releases --org ' $W/token.json"
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token"])' "$W/token.json" >"$W/astraeus-token"
  R=$W/root
  mkdir -p "$R/etc"
  cp /etc/os-release "$R/etc/os-release"
  mkdir -p "$W/bin"; ln -sf "$HERE/standins/record" "$W/bin/systemctl"
  run_installer() {
    curl -fsSL "$URL/api/v1/install.sh" | ASTRAEUS_ROOT=$R STANDIN_SPAWN=1 PATH="$W/bin:$PATH" \
      sh -s -- --apiserver "127.0.0.1:$GATE" --token-file "$W/astraeus-token" --org default \
      --org-id "$ORG_ID" --name e2e-01 "$@"
  }
  run_installer >"$W/install.out" 2>&1
  check "the installer succeeds" "grep -q 'started astraeus-agent.service' $W/install.out || { cat $W/install.out; false; }"
  check "the token is kept 0600" "[ \"\$(stat -c %a $R/etc/astraeus/token)\" = 600 ]"
  check "the machine is Up" "machine_up e2e-01"
  check "in pool a100" "grep -q '\"pool\": *\"a100\"' $W/machine.json"
  check "the controller's key is pinned" "grep -q 'public_key: \"$KEY\"' $R/etc/astraeus/agent.yaml"
  local t0 t1
  t0=$(date +%s%N)
  run_installer >"$W/install2.out" 2>&1
  t1=$(date +%s%N)
  echo "   second run: $(( (t1 - t0) / 1000000 )) ms"
  check "a second run changes nothing" "grep -q 'no change: astraeus-agent.service is running' $W/install2.out || { cat $W/install2.out; false; }"
  check "a wrong --org-id is refused" \
    "! run_installer --org-id 0000 >$W/install3.out 2>&1 && grep -q 'is not this controller' $W/install3.out"
  curl -fsSL "$URL/api/v1/install.sh" | ASTRAEUS_ROOT=$R STANDIN_SPAWN=1 PATH="$W/bin:$PATH" \
    sh -s -- --uninstall >"$W/uninstall.out" 2>&1
  check "--uninstall says what it kept" "grep -q 'kept /var/lib/astraeus/agent' $W/uninstall.out"
  check "--uninstall stopped the agent" "[ ! -f $R/run/standin-systemd/astraeus-agent.service.pid ]"
}

part_ansible() {
  echo "-- the seed's Ansible playbook"
  command -v ansible-playbook >/dev/null || { fail "ansible-playbook is missing (apt-get install ansible; bin/setup --tests)"; return; }
  local O=$W/overlay
  mkdir -p "$W/ansible-bin" "$W/home"
  ln -sf "$HERE/standins/record" "$W/ansible-bin/systemctl"
  printf '[gpu_servers]\nlocalhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3 ansible_become_method=su\n' >"$W/inventory.ini"
  cat >"$W/run-playbook.sh" <<SH
set -u
for d in etc root usr var mnt; do
  mkdir -p "$O/\$d/u" "$O/\$d/w"
  mount -t overlay overlay -o "lowerdir=/\$d,upperdir=$O/\$d/u,workdir=$O/\$d/w" "/\$d" || exit 3
done
export HOME=$W/home ASTRAEUS_TOKEN=$OWNER STANDIN_SPAWN=1 STANDIN_STATE=$W/systemd-state PATH=$W/ansible-bin:\$PATH
export ANSIBLE_NOCOLOR=1 ANSIBLE_HOST_KEY_CHECKING=False ANSIBLE_LOCALHOST_WARNING=False
play() {
  ansible-playbook -i "$W/inventory.ini" "$HERE/astraeus-machines.yml" \
    -e astraeus_console=$URL -e astraeus_org=default -e astraeus_cluster=default \
    -e astraeus_agent_url=127.0.0.1:$GATE -e astraeus_org_name=default \
    -e astraeus_org_id=$ORG_ID -e astraeus_releases=$URL/releases -e astraeus_data_dir=/mnt/nvme0/astraeus
}
play >"$W/play1.out" 2>&1; echo "rc1=\$?" >"$W/play.rc"
[ -f /etc/astraeus/token ] && echo marker=yes >>"$W/play.rc"
[ -e /root/astraeus-token ] && echo tokenfile=yes >>"$W/play.rc"
[ -d /mnt/nvme0/astraeus ] && echo datadir=yes >>"$W/play.rc"
for _ in \$(seq 100); do
  curl -fsS -H "Authorization: Bearer $OWNER" "$API_PREFIX/machines/localhost" 2>/dev/null \
    | grep -q '"state": *"Up"' && { echo up=yes >>"$W/play.rc"; break; }
  sleep 0.1
done
curl -fsS -H "Authorization: Bearer $OWNER" "$API_PREFIX/machines/localhost" >"$W/play-machine.json" 2>/dev/null
play >"$W/play2.out" 2>&1; echo "rc2=\$?" >>"$W/play.rc"
systemctl disable --now astraeus-agent.service
SH
  unshare -m bash "$W/run-playbook.sh"
  check "the first run succeeds" "grep -q '^rc1=0' $W/play.rc || { cat $W/play1.out; false; }"
  check "the join token was created (201) and the installer ran" \
    "grep -q 'changed: \[localhost\] => (item\|changed: \[localhost\]' $W/play1.out && grep -q 'TASK \[Install the Astraeus agent\]' $W/play1.out"
  check "the first run changed 3 things (token copied, installer, token file removed)" \
    "grep -Eq 'localhost +: ok=[0-9]+ +changed=3 ' $W/play1.out || { tail -5 $W/play1.out; false; }"
  check "/etc/astraeus/token marks the machine" "grep -q '^marker=yes' $W/play.rc"
  check "the token file is removed" "! grep -q '^tokenfile=yes' $W/play.rc"
  check "the data location exists" "grep -q '^datadir=yes' $W/play.rc"
  check "the machine is Up" "grep -q '^up=yes' $W/play.rc || { cat $W/play-machine.json; false; }"
  check "in pool h100" "grep -q '\"pool\": *\"h100\"' $W/play-machine.json"
  check "a second run changes nothing" \
    "grep -q '^rc2=0' $W/play.rc && grep -Eq 'localhost +: ok=[0-9]+ +changed=0 ' $W/play2.out || { tail -5 $W/play2.out; false; }"
}

for p in $PARTS; do "part_$p"; done
echo "end_to_end_test: $PASSED checks passed, $FAILED failed"
[ "$FAILED" = 0 ] || { echo "-- controller log (tail)"; tail -20 "$W/controller.log"; exit 1; }
