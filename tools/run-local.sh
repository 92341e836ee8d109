#!/bin/sh
# Runs the Remote Command Service locally: installs what is missing, builds,
# starts rcs-coordinator on an SQLite file in ./run/, creates a first tenant,
# a device and a task, sends a first job, and prints the API key and example
# curl calls. Ctrl-C stops it.
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
tools/deps.sh run
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc)" >/dev/null
bin="$root/build/bin"

mkdir -p run
port=${RCS_PORT:-8080}
db="$root/run/rcs.db"
if [ ! -f run/tenant.json ]; then
	"$bin/rcs-coordinator" init --db "$db" --user admin >run/tenant.json
fi
key=$(sed -n 's/.*"api_key": "\([^"]*\)".*/\1/p' run/tenant.json)
client_root=$(sed -n 's/.*"client_root": "\([^"]*\)".*/\1/p' run/tenant.json)

"$bin/rcs-coordinator" serve --db "$db" --listen "127.0.0.1:$port" \
	--scripts-dir "$root/scripts" >run/coordinator.log 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; echo; echo "stopped"' INT TERM EXIT
base="http://127.0.0.1:$port/v3/commands"
i=0
until curl -s -o /dev/null "$base/tasks"; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $pid 2>/dev/null; then
		echo "rcs-coordinator did not start; see run/coordinator.log" >&2
		cat run/coordinator.log >&2
		exit 1
	fi
	sleep 0.1
done

api() { curl -s -H "api-key: $key" -H "Content-Type: application/json" "$@"; }
field() { sed -n "s/.*\"$1\":\"\([^\"]*\)\".*/\1/p"; }

device=$(api -X POST "$base/devices" -d '{"name": "first-device", "tags": ["lab"]}' | field entity_ident)
task=$(api -X POST "$base/tasks" -d '{"name": "Echo", "script": "echo",
  "variables_info": {"message": {"type": "string", "alias": "Message", "optional": true}}}' |
	field ident)
job=$(api -X POST "$base/tasks/$task/jobs" \
	-d "{\"entity_ident\": \"$device\", \"variables\": {\"message\": \"hello\"}, \"comment\": \"first job\"}" |
	sed -n 's/^{"ident":"\([^"]*\)".*/\1/p')

cat <<MSG

rcs-coordinator is serving $base (log: run/coordinator.log, database: run/rcs.db)

  tenant (client_root): $client_root
  admin API key:        $key

A device, a task and a first job were created:
  device $device, task $task, job $job

Try:
  curl -s -H 'api-key: $key' $base/jobs/$job
  curl -s -H 'api-key: $key' $base/jobs/$job/history
  curl -s -H 'api-key: $key' '$base/jobs?status=pending'
  curl -s -H 'api-key: $key' -X POST $base/tasks/$task/jobs/tags \\
       -H 'Content-Type: application/json' -d '{"tag": "lab", "group_name": "lab-echo"}'
  curl -s -H 'api-key: $key' $base/groups

Without an MQTT broker configured, jobs are stored and wait "pending".
Press Ctrl-C to stop.
MSG
wait $pid
