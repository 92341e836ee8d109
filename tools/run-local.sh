#!/bin/sh
# Runs the whole Remote Command Service locally: installs what is missing,
# builds, then starts mosquitto on a free loopback port, rcs-coordinator on an
# SQLite file with the stock scripts and a task-signing key, and one local
# rcs-agent trusting that key; sends a first job and prints its result, the
# API key and example calls. Everything lives in ./run/. Ctrl-C stops it all, and so
# does any of the three daemons stopping (the script then says which, and exits 1).
#
#   tools/run-local.sh [COORDINATOR-OPTION...]
#
# Options given are added to `rcs-coordinator serve`'s (docs/coordinator.md), e.g.
# `--metrics-listen 127.0.0.1:9100 --webhook-allow-net 127.0.0.0/8`. RCS_PORT (8080)
# is the REST API's port, RCS_RUN_DIR (./run) where the state and logs go,
# RCS_BUILD_DIR (./build) where the programs are built.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
. tools/lib.sh
tools/deps.sh run
# the daemons only: the tests' packages come with tools/test.sh
build=${RCS_BUILD_DIR:-$root/build}
rcs_step "configuring the build (CMake)" cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DWITH_TESTS=OFF
rcs_step "building rcs-coordinator, rcs-agent and rcs" cmake --build "$build" -j "$(nproc)"
bin="$build/bin"
run=${RCS_RUN_DIR:-$root/run}
mkdir -p "$run/files"
port=${RCS_PORT:-8080}
free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
mqtt_port=$(free_port)
[ "$mqtt_port" = 1883 ] && mqtt_port=$(free_port)

# keys: the coordinator signs every task version, the agent trusts the public half
if [ ! -f "$run/signing-key.pem" ]; then
	openssl ecparam -name prime256v1 -genkey -noout -out "$run/signing-key.pem" 2>/dev/null
	openssl ec -in "$run/signing-key.pem" -pubout -out "$run/signing-pub.pem" 2>/dev/null
fi
db="$run/rcs.db"
if [ ! -f "$run/tenant.json" ]; then
	"$bin/rcs-coordinator" init --db "$db" --user admin 2>/dev/null >"$run/tenant.json"
fi
key=$(sed -n 's/.*"api_key": "\([^"]*\)".*/\1/p' "$run/tenant.json")
client_root=$(sed -n 's/.*"client_root": "\([^"]*\)".*/\1/p' "$run/tenant.json")

pids=""
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	for p in $pids; do wait "$p" 2>/dev/null || true; done
	echo "stopped"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$run/mosquitto.conf" <<EOF
listener $mqtt_port 127.0.0.1
allow_anonymous true
persistence false
max_queued_messages 100000
EOF
mosquitto=$(command -v mosquitto || echo /usr/sbin/mosquitto)
"$mosquitto" -c "$run/mosquitto.conf" >"$run/mosquitto.log" 2>&1 &
mosquitto_pid=$!
pids="$pids $mosquitto_pid"

# the REST port must be ours: a coordinator left from an earlier run, or any other server,
# would answer in its place
if python3 -c 'import socket, sys; s = socket.socket(); sys.exit(s.connect_ex(("127.0.0.1", int(sys.argv[1]))) != 0)' "$port"; then
	echo "port $port on 127.0.0.1 is taken (by another program, or an rcs-coordinator still" \
		"running from an earlier run): stop it, or choose another port with RCS_PORT=<port>" >&2
	exit 1
fi
"$bin/rcs-coordinator" serve --db "$db" --listen "127.0.0.1:$port" \
	--scripts-dir "$root/scripts" --signing-key "$run/signing-key.pem" \
	--mqtt "tcp://127.0.0.1:$mqtt_port" "$@" >"$run/coordinator.log" 2>&1 &
coordinator=$!
pids="$pids $coordinator"
base="http://127.0.0.1:$port/v3/commands"
# ready when this coordinator (not another server) says it listens and answers
i=0
until grep -q "REST API listening" "$run/coordinator.log" && curl -s -o /dev/null "$base/tasks"; do
	i=$((i + 1))
	if ! kill -0 "$coordinator" 2>/dev/null || [ $i -gt 100 ]; then
		echo "rcs-coordinator did not start; the end of $run/coordinator.log:" >&2
		tail -n 20 "$run/coordinator.log" >&2
		exit 1
	fi
	sleep 0.1
done

api() { curl -s -H "api-key: $key" -H "Content-Type: application/json" "$@"; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

if [ ! -f "$run/device" ]; then
	api -X POST "$base/devices" -d '{"name": "local-device", "tags": ["lab"]}' |
		field entity_ident >"$run/device"
fi
device=$(cat "$run/device")
"$bin/rcs-agent" --mqtt "tcp://127.0.0.1:$mqtt_port" --client-root "$client_root" \
	--entity-ident "$device" --state-dir "$run/agent" \
	--trusted-key "$run/signing-pub.pem" --tag local \
	--allow-command echo=/bin/echo --allow-command uname=/bin/uname \
	--allow-command uptime=/usr/bin/uptime --file-dir "$run/files" \
	--reboot-command /bin/true >"$run/agent.log" 2>&1 &
agent=$!
pids="$pids $agent"

i=0
until api "$base/devices/$device" | grep -q '"online":true'; do
	i=$((i + 1))
	if [ $i -gt 100 ]; then
		echo "the agent did not come online; see $run/agent.log:" >&2
		cat "$run/agent.log" >&2
		exit 1
	fi
	sleep 0.1
done

task=$(api -X POST "$base/tasks" -d '{"name": "Echo", "script": "echo",
  "variables_info": {"message": {"type": "string", "alias": "Message", "optional": true}}}' |
	sed -n 's/.*"ident":"\([^"]*\)".*"client_root".*/\1/p')
job=$(api -X POST "$base/tasks/$task/jobs" \
	-d "{\"entity_ident\": \"$device\", \"variables\": {\"message\": \"hello from the device\"}, \"comment\": \"first job\"}" |
	sed -n 's/^{"ident":"\([^"]*\)".*/\1/p')
i=0
until api "$base/jobs/$job" | grep -q '"status":"terminated"\|"status":"edge_error"'; do
	i=$((i + 1))
	[ $i -gt 100 ] && break
	sleep 0.1
done
result=$(api "$base/jobs/$job")

cat <<MSG

The Remote Command Service runs locally (files in $run/):
  REST API   $base            (coordinator.log, database rcs.db)
  broker     tcp://127.0.0.1:$mqtt_port     (mosquitto.log)
  agent      device $device (agent.log)

  tenant (client_root): $client_root
  admin API key:        $key

First job $job:
  $result

Try:
  curl -s -H 'api-key: $key' $base/jobs/$job/history
  curl -s -H 'api-key: $key' -X POST $base/tasks/$task/jobs -H 'Content-Type: application/json' \\
       -d '{"entity_ident": "$device", "variables": {"message": "again"}}'
  curl -s -H 'api-key: $key' -X POST $base/tasks/$task/jobs/tags -H 'Content-Type: application/json' \\
       -d '{"tag": "lab", "group_name": "lab-echo"}'
  curl -s -H 'api-key: $key' $base/devices/$device
  mosquitto_sub -p $mqtt_port -v -t 'rcs/v1/+/events/#'

Or with the command line (docs/cli.md):
  export RCS_URL=http://127.0.0.1:$port RCS_API_KEY=$key
  $bin/rcs send Echo --tag lab --var message=again --wait
  $bin/rcs jobs history $job

Press Ctrl-C to stop.
MSG
# until Ctrl-C, or one of the daemons stops: then the stack is not whole any more
while :; do
	for d in "rcs-coordinator:$coordinator:coordinator.log" "rcs-agent:$agent:agent.log" \
		"mosquitto:$mosquitto_pid:mosquitto.log"; do
		pid=${d#*:}
		log=${pid#*:}
		pid=${pid%%:*}
		if ! kill -0 "$pid" 2>/dev/null; then
			rc=0
			wait "$pid" 2>/dev/null || rc=$?
			echo "${d%%:*} stopped (exit status $rc); the end of $run/$log:" >&2
			tail -n 20 "$run/$log" >&2
			exit 1
		fi
	done
	sleep 1
done
