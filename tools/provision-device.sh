#!/bin/sh
# Provisions broker accounts for the Remote Command Service (deploy/README.md):
#
#   a device: creates it in the coordinator's inventory (POST /v3/commands/devices),
#     gives it a random broker password in mosquitto's password file (username = its
#     entity_ident) and prints the lines of its rcs-agent configuration;
#   an existing device (--entity-ident): a new password (lost or leaked credentials);
#   the coordinator's or a monitoring account (--coordinator, --monitor); one of several
#     coordinators (--coordinator --node-id ID: rcs-coordinator-ID, its rights appended to
#     the ACL file with --acl-file). A coordinator gets a second account of the same
#     password, its name with "-chunks" appended, for its connection that answers the
#     devices' artifact gets (docs/mqtt.md "Artifacts over MQTT").
#
# With --nats-accounts FILE instead of --password-file, the account is a user line of
# a NATS cluster's deploy/nats/rcs-accounts.conf (bcrypt hash, the user's permissions).
#
# The password is printed once and stored nowhere else (the file keeps a hash).
set -eu

PROG=${0##*/}

usage() {
	cat <<EOF
usage: $PROG --api URL --name NAME [--tag TAG]... --password-file FILE [options]
       $PROG --api URL --entity-ident UUID --password-file FILE [options]
       $PROG --coordinator [--node-id ID [--acl-file FILE]] --password-file FILE [options]
       $PROG --coordinator|--monitor [--username NAME] --password-file FILE [options]

  --api URL             the coordinator's REST API, e.g. https://rcs.example.com
                        (/v3/commands is added unless the URL ends with it)
  --api-key KEY         an admin API key; better: --api-key-file or \$RCS_API_KEY
  --api-key-file FILE   read the admin API key from FILE (first line)
  --name NAME           create a device of this name in the inventory
  --tag TAG             an operator tag of the new device (repeatable)
  --entity-ident UUID   an existing device: issue it a new broker password
  --coordinator         the coordinator's account (username rcs-coordinator), and
                        rcs-coordinator-chunks with the same password (artifacts)
  --node-id ID          one of several coordinators: the account rcs-coordinator-ID
                        (its client id; the coordinator runs with --node-id ID)
  --acl-file FILE       the broker's ACL file (rcs.acl): give the account the rights of
                        the "user rcs-coordinator" block there, unless it has a block
  --monitor             a read-only monitoring account (username rcs-monitor)
  --username NAME       another name for the --coordinator/--monitor account (it
                        needs its own "user" block in rcs.acl)
  --password-file FILE  mosquitto's password file (created when missing)
  --nats-accounts FILE  instead of --password-file: a NATS cluster's accounts file
                        (deploy/nats/rcs-accounts.conf; its user line is written or
                        replaced; --broker-pid a nats-server to reload)
  --broker-pid PID      send SIGHUP to this mosquitto so it reloads the password file
  --broker-url URL      also print the "mqtt URL" line of the agent's configuration
  -h, --help            this text

Prints the configuration lines for rcs-agent (--config file) or rcs-coordinator
on stdout; messages go to stderr. Exit status: 0 done, 1 failed, 2 bad usage.
EOF
}

die() {
	printf '%s: error: %s\n' "$PROG" "$*" >&2
	exit 1
}

bad_usage() {
	printf '%s: %s (see --help)\n' "$PROG" "$*" >&2
	exit 2
}

need_arg() {
	[ "$2" -ge 2 ] || bad_usage "option $1 needs a value"
}

# --- arguments -------------------------------------------------------------------------

API=
API_KEY=${RCS_API_KEY:-}
API_KEY_FILE=
NAME=
TAGS=
ENTITY=
MODE=
USERNAME=
PWFILE=
NATS_FILE=
BROKER_PID=
BROKER_URL=
NODE_ID=
ACLFILE=
HAVE_NAME=false

while [ $# -gt 0 ]; do
	case $1 in
	--api) need_arg "$1" $#; API=$2; shift 2 ;;
	--api-key) need_arg "$1" $#; API_KEY=$2; shift 2 ;;
	--api-key-file) need_arg "$1" $#; API_KEY_FILE=$2; shift 2 ;;
	--name) need_arg "$1" $#; NAME=$2; HAVE_NAME=true; shift 2 ;;
	--tag) need_arg "$1" $#
		case $2 in
		'' | *[!A-Za-z0-9_.:/-]*)
			bad_usage "tag '$2': use letters, digits and _ - . : / only" ;;
		esac
		TAGS="$TAGS $2"; shift 2 ;;
	--entity-ident) need_arg "$1" $#; ENTITY=$2; shift 2 ;;
	--coordinator) MODE=coordinator; shift ;;
	--monitor) MODE=monitor; shift ;;
	--username) need_arg "$1" $#; USERNAME=$2; shift 2 ;;
	--node-id) need_arg "$1" $#; NODE_ID=$2; shift 2 ;;
	--acl-file) need_arg "$1" $#; ACLFILE=$2; shift 2 ;;
	--password-file) need_arg "$1" $#; PWFILE=$2; shift 2 ;;
	--nats-accounts) need_arg "$1" $#; NATS_FILE=$2; shift 2 ;;
	--broker-pid) need_arg "$1" $#; BROKER_PID=$2; shift 2 ;;
	--broker-url) need_arg "$1" $#; BROKER_URL=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) bad_usage "unknown argument '$1'" ;;
	esac
done

is_uuid() {
	printf '%s\n' "$1" | grep -Eqx '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'
}

# --- NATS: the accounts file takes the password file's place (lock, checks) ---
if [ -n "$NATS_FILE" ]; then
	[ -z "$PWFILE" ] || bad_usage "--password-file or --nats-accounts, not both"
	# the NATS user line carries the rights; a mosquitto ACL is not NATS's
	[ -z "$ACLFILE" ] || bad_usage "--acl-file is mosquitto's: with --nats-accounts the user line holds the rights"
	PWFILE=$NATS_FILE
	[ -f "$NATS_FILE" ] || die "no NATS accounts file '$NATS_FILE' (copy deploy/nats/rcs-accounts.conf)"
	grep -q '^[[:space:]]*# -- end of users --' "$NATS_FILE" ||
		die "'$NATS_FILE' has no '# -- end of users --' line (deploy/nats/rcs-accounts.conf)"
fi
[ -n "$PWFILE" ] || bad_usage "--password-file (or --nats-accounts) is required"
if [ -n "$MODE" ]; then
	if [ -n "$ENTITY" ] || $HAVE_NAME || [ -n "$TAGS" ]; then
		bad_usage "--$MODE takes no --name, --tag or --entity-ident"
	fi
	if [ -n "$NODE_ID" ]; then
		[ "$MODE" = coordinator ] || bad_usage "--node-id goes with --coordinator"
		[ -z "$USERNAME" ] || bad_usage "--node-id names the account: no --username"
		case $NODE_ID in
		'' | *[!A-Za-z0-9_-]*) bad_usage "--node-id '$NODE_ID': 1-64 of A-Z a-z 0-9 _ -" ;;
		esac
		[ ${#NODE_ID} -le 64 ] || bad_usage "--node-id '$NODE_ID': 1-64 of A-Z a-z 0-9 _ -"
		USERNAME=rcs-coordinator-$NODE_ID
	fi
	[ -n "$USERNAME" ] || USERNAME=rcs-$MODE
	if [ -n "$ACLFILE" ]; then
		[ "$MODE" = coordinator ] || bad_usage "--acl-file goes with --coordinator"
	fi
	case $USERNAME in
	*[+#/:]* | events | *[[:space:]]* | *[[:cntrl:]]*)
		bad_usage "username '$USERNAME': no + # / : or blanks, and not \"events\" (rcs.acl)" ;;
	esac
	if is_uuid "$USERNAME"; then
		bad_usage "username '$USERNAME' looks like a device's entity_ident"
	fi
else
	[ -z "$USERNAME" ] || bad_usage "--username goes with --coordinator or --monitor"
	[ -z "$NODE_ID$ACLFILE" ] || bad_usage "--node-id and --acl-file go with --coordinator"
	[ -n "$API" ] || bad_usage "--api is required for a device"
	if [ -n "$ENTITY" ]; then
		if $HAVE_NAME || [ -n "$TAGS" ]; then
			bad_usage "--entity-ident takes no --name or --tag"
		fi
		is_uuid "$ENTITY" || bad_usage "--entity-ident '$ENTITY' is not a lowercase UUID"
	else
		$HAVE_NAME || bad_usage "--name (a new device) or --entity-ident (an existing one) is required"
		[ -n "$NAME" ] || bad_usage "--name must not be empty"
		case $NAME in
		*[[:cntrl:]]*) bad_usage "--name must not contain control characters" ;;
		esac
	fi
	if [ -n "$API_KEY_FILE" ]; then
		[ -r "$API_KEY_FILE" ] || die "cannot read the API key file '$API_KEY_FILE'"
		API_KEY=$(head -n 1 "$API_KEY_FILE" | tr -d '\r\n')
	fi
	[ -n "$API_KEY" ] ||
		bad_usage "an admin API key is required (--api-key-file, \$RCS_API_KEY or --api-key)"
	case $API_KEY in
	*[[:cntrl:]]*) die "the API key contains control characters" ;;
	esac
	API=${API%/}
	case $API in
	*/v3/commands) ;;
	*) API=$API/v3/commands ;;
	esac
	case $API in
	http://* | https://*) ;;
	*) bad_usage "--api '$API' is not an http:// or https:// URL" ;;
	esac
fi
if [ -n "$BROKER_PID" ]; then
	case $BROKER_PID in
	'' | *[!0-9]*) bad_usage "--broker-pid '$BROKER_PID' is not a process id" ;;
	esac
	kill -0 "$BROKER_PID" 2>/dev/null || die "no process $BROKER_PID to reload (--broker-pid)"
fi

# --- tools and files, all checked before anything changes --------------------------------

if [ -n "$NATS_FILE" ]; then PWTOOL=python3; else PWTOOL=mosquitto_passwd; fi
for tool in $PWTOOL openssl; do
	command -v "$tool" >/dev/null 2>&1 ||
		die "$tool not found (Debian: apt-get install mosquitto python3 openssl)"
done
if [ -z "$MODE" ]; then
	command -v curl >/dev/null 2>&1 || die "curl not found"
fi
PWDIR=$(dirname -- "$PWFILE")
if [ -e "$PWFILE" ]; then
	if ! [ -f "$PWFILE" ] || ! [ -r "$PWFILE" ] || ! [ -w "$PWFILE" ]; then
		die "password file '$PWFILE' is not a readable and writable file"
	fi
fi
if ! [ -d "$PWDIR" ] || ! [ -w "$PWDIR" ]; then
	die "cannot write in '$PWDIR' (the password file and its lock go there)"
fi
# the coordinator's rights, as the ACL file grants them to "user rcs-coordinator" (or to
# the user $1)
acl_rights() {
	awk -v u="${1:-rcs-coordinator}" \
		'/^user /{f = ($2 == u); next} /^pattern /{f = 0} f && /^topic /' "$ACLFILE"
}
if [ -n "$ACLFILE" ]; then
	if ! [ -f "$ACLFILE" ] || ! [ -r "$ACLFILE" ] || ! [ -w "$ACLFILE" ]; then
		die "ACL file '$ACLFILE' is not a readable and writable file"
	fi
	[ -w "$(dirname -- "$ACLFILE")" ] || die "cannot write in the directory of '$ACLFILE'"
	[ -n "$(acl_rights)" ] || die "'$ACLFILE' has no \"user rcs-coordinator\" block to copy"
	[ -n "$(acl_rights rcs-coordinator-chunks)" ] ||
		die "'$ACLFILE' has no \"user rcs-coordinator-chunks\" block to copy"
fi

PASSWORD=$(openssl rand -hex 24) || die "openssl rand failed"
[ ${#PASSWORD} -eq 48 ] || die "openssl rand gave no password"

# --- one writer of the password file at a time -------------------------------------------

LOCK=$PWFILE.lock
TMPDIR_=
PWTMP=
cleanup() {
	[ -z "$TMPDIR_" ] || rm -rf -- "$TMPDIR_"
	[ -z "$PWTMP" ] || rm -f -- "$PWTMP"
	[ -z "${ACLTMP:-}" ] || rm -f -- "$ACLTMP"
	[ "${LOCKED:-false}" = false ] || rmdir -- "$LOCK" 2>/dev/null || :
}
LOCKED=false
trap cleanup EXIT
trap 'exit 1' HUP INT TERM
tries=0
until mkdir -- "$LOCK" 2>/dev/null; do
	tries=$((tries + 1))
	[ $tries -lt 100 ] || die "'$LOCK' exists: another $PROG is running, or remove the stale lock"
	sleep 0.1 2>/dev/null || sleep 1
done
LOCKED=true
TMPDIR_=$(mktemp -d) || die "mktemp failed"

# --- the inventory -----------------------------------------------------------------------

json_string() {
	printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"
}

# api METHOD PATH [BODY]: the answer's body in $TMPDIR_/body, its status in HTTP_STATUS
api() {
	set -- "$1" "$API$2" "${3:-}"
	if [ -n "$3" ]; then
		printf 'api-key: %s\n' "$API_KEY" | curl -sS -X "$1" -H @- \
			-H 'Content-Type: application/json' --data-binary "$3" \
			-o "$TMPDIR_/body" -w '%{http_code}' -- "$2" >"$TMPDIR_/status" ||
			die "cannot reach the coordinator at $2"
	else
		printf 'api-key: %s\n' "$API_KEY" | curl -sS -X "$1" -H @- \
			-o "$TMPDIR_/body" -w '%{http_code}' -- "$2" >"$TMPDIR_/status" ||
			die "cannot reach the coordinator at $2"
	fi
	HTTP_STATUS=$(cat "$TMPDIR_/status")
}

# json_field NAME: a string member of the answer (UUIDs: no escapes to undo)
json_field() {
	tr -d '\n' <"$TMPDIR_/body" |
		sed -n 's/.*"'"$1"'"[[:space:]]*:[[:space:]]*"\([0-9a-f-]*\)".*/\1/p'
}

api_error() {
	msg=$(tr -d '\n' <"$TMPDIR_/body" |
		sed -n 's/.*"message"[[:space:]]*:[[:space:]]*"\([^"]*\)".*/\1/p')
	die "$1: HTTP $HTTP_STATUS${msg:+: $msg}"
}

CLIENT_ROOT=
if [ -z "$MODE" ]; then
	if [ -n "$ENTITY" ]; then
		api GET "/devices/$ENTITY"
		[ "$HTTP_STATUS" = 200 ] || api_error "cannot read device $ENTITY"
	else
		tags_json=
		for t in $TAGS; do
			tags_json="$tags_json${tags_json:+, }\"$t\""
		done
		api POST /devices "{\"name\": $(json_string "$NAME"), \"tags\": [$tags_json]}"
		[ "$HTTP_STATUS" = 201 ] || api_error "cannot create the device"
		ENTITY=$(json_field entity_ident)
		is_uuid "$ENTITY" || die "no entity_ident in the coordinator's answer: $(cat "$TMPDIR_/body")"
		printf '%s: created device %s\n' "$PROG" "$ENTITY" >&2
	fi
	CLIENT_ROOT=$(json_field client_root)
	is_uuid "$CLIENT_ROOT" || die "no client_root in the coordinator's answer: $(cat "$TMPDIR_/body")"
	USERNAME=$ENTITY
fi

# --- the broker account ------------------------------------------------------------------
# --- NATS: a user line in the accounts file (deploy/nats/rcs-accounts.conf) ---
# ('$' in single quotes: a bcrypt prefix and NATS's $MQTT subjects, not expansions)
# shellcheck disable=SC2016
nats_user_line() { # NAME MODE (coordinator, chunks, monitor, or a device's "")
	# the name goes into the configuration file between quotes
	case $1 in
	*[!A-Za-z0-9_-]*) die "username '$1': NATS accounts take A-Z a-z 0-9 _ - only" ;;
	esac
	# bcrypt: Python's crypt module (Debian 12's python3), else python3-bcrypt (newer
	# Pythons have no crypt module)
	hash=$(printf '%s\n' "$PASSWORD" | python3 -W ignore -c '
import sys
pw = sys.stdin.readline().strip()
try:
    import crypt
    print(crypt.crypt(pw, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2048)))
except ImportError:
    import bcrypt
    print(bcrypt.hashpw(pw.encode(), bcrypt.gensalt(11, prefix=b"2b")).decode())') ||
		die "python3 could not hash the password (with Python 3.13 or newer: install python3-bcrypt)"
	case $hash in
	'$2b$'*) ;;
	*) die "python3 made no bcrypt hash" ;;
	esac
	if [ "$2" = chunks ]; then
		pub='{allow: ["rcs.v1.*.*.artifacts.*.data.*", "rcs.v1.*.*.artifacts.*.error"]}'
		sub='{allow: ["rcs.v1.*.*.artifacts.*.get", "$MQTT.sub.>"]}'
	elif [ "$2" = coordinator ]; then
		pub='{allow: ["rcs.v1.*.*.jobs.*", "rcs.v1.*.*.jobs.*.cancel", "rcs.v1.*.events.>", "rcs.v1._coordinators.probe.*"]}'
		sub='{allow: ["rcs.v1.*.*.jobs.*.status", "rcs.v1.*.*.state", "rcs.v1._coordinators.probe.*", "$MQTT.sub.>"]}'
	elif [ "$2" = monitor ]; then
		pub='{deny: [">"]}'
		sub='{allow: ["rcs.v1.*.events", "rcs.v1.*.events.>", "rcs.v1.*.*.state", "$MQTT.sub.>"]}'
	else
		pub="{allow: [\"rcs.v1.*.$1.jobs.*.status\", \"rcs.v1.*.$1.state\", \"rcs.v1.*.$1.artifacts.*.get\"]}"
		sub="{allow: [\"rcs.v1.*.$1.jobs.*\", \"rcs.v1.*.$1.jobs.*.cancel\", \"rcs.v1.*.$1.artifacts.>\", \"\$MQTT.sub.>\"]}"
	fi
	printf '      {user: "%s", password: "%s", permissions: {publish: %s, subscribe: %s}}\n' \
		"$1" "$hash" "$pub" "$sub"
}

if [ -n "$NATS_FILE" ]; then
	# the user's old line goes, the new one goes before the end marker; on a copy
	# renamed into place, as for mosquitto's file (nats-server reads it at a reload)
	PWTMP=$PWFILE.new.$$
	NATS_LINE=$(nats_user_line "$USERNAME" "$MODE")
	if [ "$MODE" = coordinator ]; then
		# the connection for artifacts: its own user, the same password
		NATS_LINE=$NATS_LINE$(printf '\n%s' "$(nats_user_line "$USERNAME-chunks" chunks)")
	fi
	export NATS_LINE
	cp -p -- "$PWFILE" "$PWTMP" || die "cannot copy '$PWFILE' to '$PWTMP'"
	awk -v u="{user: \"$USERNAME\"," -v c="{user: \"$USERNAME-chunks\"," '
		index($0, u) || index($0, c) { next }
		/^[[:space:]]*# -- end of users --/ { print ENVIRON["NATS_LINE"] }
		{ print }' "$PWFILE" >"$PWTMP" || {
		rm -f -- "$PWTMP"
		die "cannot write '$PWTMP'"
	}
	mv -f -- "$PWTMP" "$PWFILE" || {
		rm -f -- "$PWTMP"
		die "cannot replace '$PWFILE'"
	}
else

	# mosquitto_passwd rewrites its file in place: a broker reloading at that moment (the
	# SIGHUP of the previous run) would read it half written and drop every client whose
	# line it missed, the coordinator included. So the copy next to it is updated and
	# renamed over it: a reader sees the old file or the new one, whole.
	NEWFILE=false
	PWTMP=$PWFILE.new.$$
	if [ -e "$PWFILE" ]; then
		cp -p -- "$PWFILE" "$PWTMP" || die "cannot copy '$PWFILE' to '$PWTMP'"
		set -- -b
	else
		set -- -c -b
		NEWFILE=true
	fi
	if ! (umask 077 && mosquitto_passwd "$@" "$PWTMP" "$USERNAME" "$PASSWORD") >&2 ||
		{ [ "$MODE" = coordinator ] &&
			! (mosquitto_passwd -b "$PWTMP" "$USERNAME-chunks" "$PASSWORD") >&2; }; then
		rm -f -- "$PWTMP"
		if [ -n "$CLIENT_ROOT" ]; then
			die "device $ENTITY is in the inventory but its broker password was not set: fix" \
				"the password file, then run $PROG again with --entity-ident $ENTITY"
		fi
		die "mosquitto_passwd could not write '$PWFILE'"
	fi
	if $NEWFILE; then
		# mosquitto reads it after dropping root privileges (user mosquitto); later
		# runs keep owner and mode (cp -p)
		if [ "$(id -u)" = 0 ] && chgrp mosquitto "$PWTMP" 2>/dev/null; then
			chmod 640 "$PWTMP"
			printf '%s: created %s (root:mosquitto, mode 640)\n' "$PROG" "$PWFILE" >&2
		else
			printf '%s: created %s (mode 600): make it readable by the user mosquitto runs as\n' \
				"$PROG" "$PWFILE" >&2
		fi
	fi
	mv -f -- "$PWTMP" "$PWFILE" || {
		rm -f -- "$PWTMP"
		die "cannot replace '$PWFILE'"
	}
fi
printf '%s: broker account %s written to %s\n' "$PROG" "$USERNAME" "$PWFILE" >&2
[ "$MODE" != coordinator ] ||
	printf '%s: broker account %s-chunks (the same password) written to %s\n' "$PROG" \
		"$USERNAME" "$PWFILE" >&2

# the rights of a coordinator account of its own: a copy of rcs-coordinator's, appended to
# a copy of the ACL file renamed into place (a reloading broker reads it whole)
if [ -n "$ACLFILE" ] && [ "$USERNAME" != rcs-coordinator ]; then
	if grep -qx "user $USERNAME" "$ACLFILE"; then
		printf '%s: %s already has its block in %s\n' "$PROG" "$USERNAME" "$ACLFILE" >&2
	else
		ACLTMP=$ACLFILE.new.$$
		cp -p -- "$ACLFILE" "$ACLTMP" || die "cannot copy '$ACLFILE'"
		{
			printf '\n# --- coordinator %s (tools/provision-device.sh) ---\n' "$USERNAME"
			printf 'user %s\n' "$USERNAME"
			acl_rights
			printf 'user %s-chunks\n' "$USERNAME"
			acl_rights rcs-coordinator-chunks
		} >>"$ACLTMP" || die "cannot write '$ACLTMP'"
		mv -f -- "$ACLTMP" "$ACLFILE" || die "cannot replace '$ACLFILE'"
		ACLTMP=
		printf '%s: rights of %s added to %s\n' "$PROG" "$USERNAME" "$ACLFILE" >&2
	fi
elif [ -z "$NATS_FILE" ] && [ "$MODE" = coordinator ] && [ "$USERNAME" != rcs-coordinator ]; then
	printf '%s: %s needs a "user %s" block in rcs.acl, a copy of the lines of %s\n' \
		"$PROG" "$USERNAME" "$USERNAME" "user rcs-coordinator (or run with --acl-file)" >&2
	printf '%s: and %s-chunks one, a copy of those of user rcs-coordinator-chunks\n' \
		"$PROG" "$USERNAME" >&2
fi
rmdir -- "$LOCK" && LOCKED=false

# --- the configuration lines (before the reload: a failed reload must not lose them) -----

if [ "$MODE" = coordinator ]; then
	printf '# rcs-coordinator configuration (--config file)\n'
	[ -z "$NODE_ID" ] || printf 'node_id %s\n' "$NODE_ID"
elif [ "$MODE" = monitor ]; then
	printf '# monitoring account: mosquitto_sub -u USERNAME -P PASSWORD -t "rcs/v1/+/events/#"\n'
else
	printf '# rcs-agent configuration of device %s (--config file)\n' "$ENTITY"
	[ -z "$BROKER_URL" ] || printf 'mqtt %s\n' "$BROKER_URL"
	printf 'client_root %s\n' "$CLIENT_ROOT"
	printf 'entity_ident %s\n' "$ENTITY"
fi
printf 'mqtt_username %s\n' "$USERNAME"
printf 'mqtt_password %s\n' "$PASSWORD"

if [ -z "$BROKER_PID" ]; then
	printf '%s: reload the broker to use it (systemctl reload mosquitto, or kill -HUP;\n' \
		"$PROG" >&2
	printf '%s: NATS: copy the accounts file to every node, nats-server --signal reload)\n' \
		"$PROG" >&2
elif kill -HUP "$BROKER_PID"; then
	printf '%s: broker %s reloads its password and ACL files\n' "$PROG" "$BROKER_PID" >&2
else
	die "cannot signal the broker ($BROKER_PID): the account is written, reload it yourself"
fi
