#!/usr/bin/env bash
# make compose-test: deploy/compose.yaml for real, with Docker, on a machine with no image
# registry (docs/deploy.md, "compose-test"). As root (it starts its own dockerd):
#
#   1. installs docker.io, docker-compose and debootstrap with apt-get when missing;
#   2. starts its OWN dockerd (socket and exec root in a temp dir, data root in the cache, so a
#      second run finds its images) and stops it at the end, on failure too;
#   3. base images: the real ones when `docker pull` works, else stand-ins built from
#      `debootstrap --variant=minbase` (bookworm, trixie) + deploy/compose-test/images/*;
#   4. `docker-compose build` of the Nexus images, `up -d` with the profiles `test` (the offline
#      model, the fake Plane, the fake Slack), `plane` and `channels` (plane-sync and the
#      gateway, pointed at the fakes) and `mcp` (the MCP server), waits until every service's
#      healthcheck says healthy;
#   5. as an operator, with the host venv's `nexus` CLI as NATS user admin on the published
#      port: applies an agent, runs it to completion, finds what memory learned from the run;
#      then the Plane and Slack round trips of roundtrips.py (a labelled work item and a Slack
#      mention each start a run whose result comes back to the fake); the MCP server answers
#      /healthz and refuses /mcp without a token (401);
#   6. checks the NATS server log has no permission violation, each service connected as its
#      own user (each run's runner as its run: run:<run id>) and runs as the user its image says; `stop` (every Nexus service drains and
#      exits 0), `down -v`.
#
# Environment: COMPOSE_TEST_CACHE (default .cache/compose-test: debootstrap tarballs, Docker
# data root; delete it for a cold run), COMPOSE_TEST_PULL=0 (skip trying registries),
# COMPOSE_TEST_KEEP_CACHE=0 (remove the Docker data root at the end), COMPOSE_TEST_KEEP_UP=1
# (leave the stack and dockerd running at the end, success or failure, to look at or re-run
# steps; it prints how to reach them; stop with `kill $(cat RUNDIR/dockerd.pid)`).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/deploy/compose-test"
CACHE=${COMPOSE_TEST_CACHE:-$ROOT/.cache/compose-test}
PROJECT=nexus-compose-test
AGENT=compose-smoke
NICE="nice -n 10"
STARTED=$SECONDS
PHASE_NAME=""
PHASE_START=$SECONDS
PHASES=()

log() { printf '[compose-test %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
die() { log "FAILED: $*"; exit 1; }
phase() {
  end_phase
  PHASE_NAME=$1
  PHASE_START=$SECONDS
  log "== $1"
}
end_phase() {
  if [ -n "$PHASE_NAME" ]; then
    PHASES+=("$(printf '%-38s %5d s' "$PHASE_NAME" $((SECONDS - PHASE_START)))")
    PHASE_NAME=""
  fi
}
report_times() {
  end_phase
  log "phase times:"
  for line in "${PHASES[@]}"; do printf '    %s\n' "$line"; done
  printf '    %-38s %5d s\n' "total" $((SECONDS - STARTED))
}

[ "$(id -u)" = 0 ] || die "run as root: it starts its own dockerd (CI runs as root)"
mkdir -p "$CACHE"
# One run at a time per cache: two dockerds on one data root would corrupt it.
exec 9>"$CACHE/lock"
flock -n 9 || die "another compose-test holds $CACHE/lock"

# ---- 1. tools ---------------------------------------------------------------------------
phase "install docker/compose/debootstrap"
need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v docker-compose >/dev/null || need+=(docker-compose)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v ip >/dev/null || need+=(iproute2)
# debootstrap checks Debian's Release signatures (a separate package outside Debian, e.g. Ubuntu).
[ -s /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -gt 0 ]; then
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  $NICE apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The docker.io client matches its daemon (another client may be first on PATH).
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker)
# Compose v2 (`docker compose`, has `up --wait`) when present, else the python docker-compose.
if $DOCKER compose version >/dev/null 2>&1; then
  COMPOSE=("$DOCKER" compose)
else
  COMPOSE=(docker-compose)
fi
[ -x "$ROOT/.venv/bin/nexus" ] || (cd "$ROOT" && make setup >/dev/null)
NEXUS_CLI="$ROOT/.venv/bin/nexus"
PY="$ROOT/.venv/bin/python"

# ---- 2. our own dockerd -----------------------------------------------------------------
phase "start dockerd"
RUNDIR=$(mktemp -d /tmp/nexus-compose-test.XXXXXX)
DATA_ROOT="$CACHE/docker"
DOCKERD_PID=""
UP=0
# Its own bridge and address pools: installing docker.io may start the system's dockerd, which
# owns docker0 and 172.17-31.x; two daemons on one bridge or pool would hand out the same IPs.
BRIDGE=nxct0
BRIDGE_CIDR=10.213.213.1/24
ADDRESS_POOLS=base=10.214.0.0/16,size=24
export DOCKER_HOST="unix://$RUNDIR/docker.sock"

cleanup() {
  local code=$?
  set +e
  if [ "${COMPOSE_TEST_KEEP_UP:-0}" = 1 ] && [ -n "$DOCKERD_PID" ]; then
    [ "$code" = 0 ] || { compose ps; compose logs --no-color --tail=80; }
    report_times
    log "COMPOSE_TEST_KEEP_UP=1: stack and dockerd left running (exit $code):"
    log "  export DOCKER_HOST=$DOCKER_HOST; cd $ROOT/deploy && docker-compose -p $PROJECT $PROFILES ps"
    log "  ports: nats ${NATS_PORT:-}, plane-sync ${PLANE_SYNC_PORT:-}, gateway ${GATEWAY_PORT:-}," \
      "fake Plane ${FAKE_PLANE_PORT:-}, fake Slack ${FAKE_SLACK_PORT:-}"
    log "  when done: compose down -v; kill \$(cat $RUNDIR/dockerd.pid); ip link delete $BRIDGE;" \
      "rm -rf $RUNDIR (the cache lock is released now)"
    exit "$code"
  fi
  if [ "$UP" = 1 ]; then
    if [ "$code" != 0 ]; then
      log "failure: service states and logs"
      compose ps
      compose logs --no-color --tail=80
    fi
    compose down -v --remove-orphans >/dev/null 2>&1
  fi
  if [ -n "$DOCKERD_PID" ] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    # Superseded image versions older than 3 days. Not all dangling images: the legacy
    # builder keeps each build stage (the installed venvs) as one, the next run's cache.
    $DOCKER image prune -f --filter until=72h >/dev/null 2>&1
    kill "$DOCKERD_PID"
    for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$DOCKERD_PID" 2>/dev/null && kill -9 "$DOCKERD_PID"
  fi
  if [ "$code" != 0 ] && [ -f "$RUNDIR/dockerd.log" ]; then
    log "dockerd log (tail):"
    tail -20 "$RUNDIR/dockerd.log"
  fi
  ip link delete "$BRIDGE" >/dev/null 2>&1
  rm -rf "$RUNDIR"
  if [ "${COMPOSE_TEST_KEEP_CACHE:-1}" = 0 ]; then rm -rf "$DATA_ROOT"; fi
  report_times
  if [ "$code" = 0 ]; then log "OK"; else log "FAILED (exit $code)"; fi
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$DATA_ROOT"
ip link delete "$BRIDGE" >/dev/null 2>&1 || true  # left over by a killed run
ip link add name "$BRIDGE" type bridge
ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
ip link set "$BRIDGE" up
# Niced: builds and containers run as its children (2 shared cores; the client is idle).
$NICE dockerd --data-root "$DATA_ROOT" --exec-root "$RUNDIR/exec" --pidfile "$RUNDIR/dockerd.pid" \
  --host "$DOCKER_HOST" --bridge "$BRIDGE" --default-address-pool "$ADDRESS_POOLS" \
  >"$RUNDIR/dockerd.log" 2>&1 9>&- &
DOCKERD_PID=$!
for _ in $(seq 120); do
  $DOCKER info >/dev/null 2>&1 && break
  kill -0 "$DOCKERD_PID" 2>/dev/null || die "dockerd exited: $(tail -5 "$RUNDIR/dockerd.log")"
  sleep 0.5
done
$DOCKER info >/dev/null 2>&1 || die "dockerd did not answer on $DOCKER_HOST within 60 s"
log "dockerd $($DOCKER version -f '{{.Server.Version}}') on $DOCKER_HOST, data root $DATA_ROOT"

# ---- 3. base images: real, or stand-ins ---------------------------------------------------
STAND_IN_LABEL=nexus.compose-test.stand-in
declare -A STAND_INS=([python:3.11-slim]=python [nats:2.11-alpine]=nats
  [pgvector/pgvector:pg17]=postgres [prom/prometheus:v3.0.1]=prometheus)
suite_of() { case $1 in postgres) echo trixie ;; *) echo bookworm ;; esac; }
debootstrap_tarball() {  # SUITE: $CACHE/debian-SUITE.tar, made once (the slow part of a cold run)
  local suite=$1 tarball="$CACHE/debian-$1.tar" script=/usr/share/debootstrap/scripts/$1
  [ -s "$tarball" ] && return
  rm -rf "$CACHE/root-$suite"
  # An older debootstrap may lack the newer suite's script; Debian's own links it to sid's.
  [ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
  $NICE debootstrap --variant=minbase --keyring=/usr/share/keyrings/debian-archive-keyring.gpg \
    "$suite" "$CACHE/root-$suite" http://deb.debian.org/debian "$script" \
    >"$CACHE/debootstrap-$suite.log" 2>&1 || return 1
  tar -C "$CACHE/root-$suite" -c . >"$tarball.tmp"
  mv "$tarball.tmp" "$tarball"
  rm -rf "$CACHE/root-$suite"
}
is_stand_in() { [ -n "$($DOCKER image inspect -f "{{index .Config.Labels \"$STAND_IN_LABEL\"}}" "$1")" ]; }
need_stand_in() {  # IMAGE: true unless the real image is here or can be pulled
  if $DOCKER image inspect "$1" >/dev/null 2>&1; then
    if is_stand_in "$1"; then return 0; fi
    log "$1: the real image (pulled before)"
    return 1
  fi
  if [ "${COMPOSE_TEST_PULL:-1}" != 0 ] && timeout 90 $DOCKER pull -q "$1" >/dev/null 2>&1; then
    log "$1: pulled"
    return 1
  fi
  return 0
}
build_stand_in() {  # IMAGE DIR: IMAGE built from deploy/compose-test/images/DIR
  local image=$1 dir=$2 ctx="$RUNDIR/ctx-$2"
  cp -r "$HERE/images/$dir" "$ctx"
  cp /etc/ssl/certs/ca-certificates.crt "$ctx/host-ca-bundle.crt"
  if [ "$dir" = nats ]; then
    cp "$("$PY" -c 'from nexus_testing import nats_server_binary as n; print(n())')" "$ctx/nats-server"
  fi
  log "$image: stand-in from images/$dir"
  $DOCKER build -q --label "$STAND_IN_LABEL=$dir" -f "$ctx/Containerfile" -t "$image" "$ctx" >/dev/null ||
    die "building the stand-in $image"
}
# docker-compose 1.x builds with the `docker` on PATH: the one matching our daemon.
PROFILES="--profile test --profile plane --profile channels --profile mcp"
# shellcheck disable=SC2086  # PROFILES is words on purpose
compose() { (cd "$ROOT/deploy" && PATH="$(dirname "$DOCKER"):$PATH" "${COMPOSE[@]}" -p "$PROJECT" $PROFILES "$@"); }
active() {  # active KIND: the services `up` with PROFILES starts ("all") or their pulled images
  "$PY" - "$ROOT/deploy/compose.yaml" "$1" <<'EOF'
import sys, yaml
services = yaml.safe_load(open(sys.argv[1]))["services"]
for name, s in services.items():
    if set(s.get("profiles", [])) <= {"test", "plane", "channels", "mcp"}:
        if sys.argv[2] == "all":
            print(name)
        elif "build" not in s:
            print(s["image"])
EOF
}

phase "base images (pull or stand-ins)"
# python:3.11-slim is the Dockerfile's base; the others are compose's images it does not build.
wanted=(python:3.11-slim $(active images))
stand_ins=()
declare -A suites=()
for image in "${wanted[@]}"; do
  [ -n "${STAND_INS[$image]:-}" ] || die "compose uses $image, which has no stand-in here"
  if need_stand_in "$image"; then
    stand_ins+=("$image")
    suites[$(suite_of "${STAND_INS[$image]}")]=1
  fi
done
# Both debootstraps at once (mostly waiting on the network), then the imports.
pids=()
for suite in "${!suites[@]}"; do
  [ -s "$CACHE/debian-$suite.tar" ] && continue
  log "debootstrap --variant=minbase $suite"
  debootstrap_tarball "$suite" & pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || die "debootstrap failed: see $CACHE/debootstrap-*.log"; done
for suite in "${!suites[@]}"; do
  $DOCKER image inspect "nexus-compose-test/debian:$suite" >/dev/null 2>&1 ||
    $DOCKER import "$CACHE/debian-$suite.tar" "nexus-compose-test/debian:$suite" >/dev/null
done
for image in "${stand_ins[@]}"; do build_stand_in "$image" "${STAND_INS[$image]}"; done

# ---- 4. the Nexus images, the stack ------------------------------------------------------
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
export NATS_PORT NATS_MONITOR_PORT POSTGRES_PORT PROMETHEUS_PORT PLANE_SYNC_PORT GATEWAY_PORT \
  FAKE_PLANE_PORT FAKE_SLACK_PORT MCP_PORT CONSOLE_PORT
NATS_PORT=$(free_port) NATS_MONITOR_PORT=$(free_port) POSTGRES_PORT=$(free_port) PROMETHEUS_PORT=$(free_port)
PLANE_SYNC_PORT=$(free_port) GATEWAY_PORT=$(free_port) FAKE_PLANE_PORT=$(free_port) FAKE_SLACK_PORT=$(free_port)
MCP_PORT=$(free_port) CONSOLE_PORT=$(free_port)
# The runs and memory's extraction ask the offline model (the `test` profile's service).
export NEXUS_LLM_BASE_URL=http://offline-model:8090/v1
# plane-sync and the gateway talk to the fakes (profile `test`); the fakes take the same key,
# project and secrets from these variables. The same names as `nexus dev` and compose read.
export NEXUS_PLANE_URL=http://fake-plane:8080 NEXUS_PLANE_API_KEY=compose-test-plane-key \
  NEXUS_PLANE_WORKSPACE=nexus NEXUS_PLANE_PROJECT_ID=compose-test-project \
  NEXUS_PLANE_WEBHOOK_SECRET=compose-test-webhook-secret NEXUS_PLANE_AGENT_RUNS=auto
export NEXUS_SLACK_BASE_URL=http://fake-slack:8080/api/ NEXUS_SLACK_BOT_TOKEN=xoxb-compose-test \
  NEXUS_SLACK_SIGNING_SECRET=compose-test-signing-secret
# Where roundtrips.py reaches them from the host (published ports).
export FAKE_PLANE_URL=http://127.0.0.1:$FAKE_PLANE_PORT FAKE_SLACK_URL=http://127.0.0.1:$FAKE_SLACK_PORT/api
export GATEWAY_URL=http://127.0.0.1:$GATEWAY_PORT
ADMIN_PASSWORD=${NEXUS_ADMIN_NATS_PASSWORD:-admin-dev-password}

phase "build Nexus images"
compose build -q >"$RUNDIR/build.log" 2>&1 || { cat "$RUNDIR/build.log"; die "docker-compose build"; }
for image in nexus/core:dev nexus/memory:dev nexus/runner:dev nexus/flows:dev \
  nexus/plane-sync:dev nexus/channel-gateway:dev nexus/console:dev nexus/lab:dev nexus/spend:dev nexus/cli:dev; do
  $DOCKER image inspect "$image" >/dev/null || die "$image was not built"
done

wait_healthy() {  # SERVICE...: until each one's healthcheck says healthy (300 s)
  local deadline=$((SECONDS + 300)) pending svc id state status health restarts
  while :; do
    pending=()
    for svc in "$@"; do
      id=$(compose ps -q "$svc")
      [ -n "$id" ] || die "service $svc has no container"
      state=$($DOCKER inspect -f '{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}} {{.RestartCount}}' "$id")
      read -r status health restarts <<<"$state"
      [ "$health" != none ] || die "service $svc has no healthcheck"
      [ "$restarts" = 0 ] || die "service $svc restarted ($restarts): $(compose logs --no-color --tail=20 "$svc")"
      [ "$status" = running ] || die "service $svc is $status"
      [ "$health" = healthy ] || pending+=("$svc:$health")
    done
    [ ${#pending[@]} -eq 0 ] && break
    [ $SECONDS -lt $deadline ] || die "not healthy within 300 s: ${pending[*]}"
    sleep 2
  done
}

phase "up -d, wait until healthy"
UP=1
compose down -v --remove-orphans >/dev/null 2>&1 || true  # a killed run's leftovers
# The fakes first: plane-sync and the gateway ask them who they are when they start.
compose up -d --no-build fake-plane fake-slack
wait_healthy fake-plane fake-slack
compose up -d --no-build
services=$(active all)
# shellcheck disable=SC2086  # one word per service
wait_healthy $services
log "healthy: $(echo $services)"

# ---- 5. a run and a memory search, as an operator ------------------------------------------
phase "operator: agent, run, memory search"
export NEXUS_NATS_URL="nats://admin:$ADMIN_PASSWORD@127.0.0.1:$NATS_PORT"
cat >"$RUNDIR/agent.yaml" <<EOF
id: $AGENT
role: implementer
description: compose-test's agent; the offline model's chat script answers it.
model:
  name: gpt-4o-mini
system_prompt: "[offline-model:chat] You greet and finish."
tools: [finish]
EOF
"$NEXUS_CLI" agents apply -f "$RUNDIR/agent.yaml"
RUN_ID="run-compose-$(date +%s)"
"$NEXUS_CLI" --timeout 10 run "$AGENT" --run-id "$RUN_ID" -i "Say hello." --follow --wait 300 ||
  die "run $RUN_ID did not complete: $("$NEXUS_CLI" attach "$RUN_ID" 2>&1)"
"$NEXUS_CLI" attach "$RUN_ID" -o json >"$RUNDIR/attach.json"
"$PY" - "$RUNDIR/attach.json" <<'EOF'
import json, sys
snapshot = json.load(open(sys.argv[1]))
assert snapshot["run"]["status"] == "completed", snapshot["run"]
assert snapshot["phase"] == "completed", snapshot["phase"]
EOF
log "run $RUN_ID completed"
# Memory extracts the run's lesson after it ends (asking the same model): wait for a hit.
deadline=$((SECONDS + 120))
while :; do
  "$NEXUS_CLI" memory search "hello from the offline model" -s "agent:$AGENT" -o json \
    >"$RUNDIR/memory.json" || true  # a timed-out ask is retried like an empty answer
  if "$PY" - "$RUNDIR/memory.json" "$RUN_ID" <<'EOF'
import json, sys
found = json.load(open(sys.argv[1]))
items = found["items"] if isinstance(found, dict) else found
sys.exit(0 if any(sys.argv[2] in item["text"] for item in items) else 1)
EOF
  then break; fi
  [ $SECONDS -lt $deadline ] || die "memory search found nothing from $RUN_ID: $(cat "$RUNDIR/memory.json")"
  sleep 2
done
log "memory search finds what $RUN_ID taught: $("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["items"][0]["text"])' "$RUNDIR/memory.json")"

phase "operator: Plane round trip"
(cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" deploy/compose-test/roundtrips.py plane "$AGENT") || die "the Plane round trip"
phase "operator: Slack round trip"
(cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" deploy/compose-test/roundtrips.py slack "$AGENT") || die "the Slack round trip"

phase "operator: MCP server health and token check"
# /healthz answers without a token; /mcp refuses a request without one, and one with a token
# the (committed, empty) tokens file does not hold: HTTP 401 with a one-line JSON reason.
"$PY" - "$MCP_PORT" <<'EOF'
import json, sys, urllib.error, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
with urllib.request.urlopen(f"{base}/healthz", timeout=5) as resp:
    assert resp.status == 200, resp.status
body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
for headers in ({}, {"Authorization": "Bearer not-a-token"}):
    request = urllib.request.Request(
        f"{base}/mcp", data=body, method="POST",
        headers={"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream", **headers},
    )
    try:
        urllib.request.urlopen(request, timeout=5)
    except urllib.error.HTTPError as exc:
        assert exc.code == 401, exc.code
        reason = json.loads(exc.read())["error"]
        assert reason and "\n" not in reason, reason
    else:
        raise AssertionError(f"/mcp answered without a valid token ({headers})")
print("    MCP server: /healthz 200, /mcp 401 without a valid token")
EOF

phase "operator: an eval suite through the lab"
# The example suites apply (the catalog's eval kind); a one-case suite over the agent above
# runs through the lab (its case run goes through the scheduler like any run), and the lab's
# report says the case passed.
"$NEXUS_CLI" eval apply "$ROOT/examples/evals/" || die "nexus eval apply examples/evals/"
cat >"$RUNDIR/suite.yaml" <<EOF
id: compose-smoke
description: compose-test's suite; the offline model's chat script answers its one case.
cases:
  - id: hello
    input: Say hello.
    graders:
      - kind: max_turns
        turns: 5
EOF
"$NEXUS_CLI" eval apply "$RUNDIR/suite.yaml" || die "nexus eval apply of compose-test's suite"
"$NEXUS_CLI" eval ls -o json >"$RUNDIR/suites.json"
"$NEXUS_CLI" --timeout 20 eval run compose-smoke --agent "$AGENT@1" --wait --wait-for 300 -o json \
  >"$RUNDIR/eval.json" || die "the eval run did not complete: $(cat "$RUNDIR/eval.json")"
"$NEXUS_CLI" eval ls-runs -o json >"$RUNDIR/evals.json" || die "the lab's evals.list"
"$PY" - "$RUNDIR/suites.json" "$RUNDIR/eval.json" "$RUNDIR/evals.json" <<'EOF'
import json, sys
suites = {s["suite"]["id"] for s in json.load(open(sys.argv[1]))["suites"]}
assert {"implementer-smoke", "compose-smoke"} <= suites, suites
report = json.load(open(sys.argv[2]))
assert report["status"] == "completed", report
[revision] = report["revisions"]
assert (revision["graded"], revision["passed"]) == (1, 1), revision
listed = [e["eval_run_id"] for e in json.load(open(sys.argv[3]))["evals"]]
assert report["eval_run_id"] in listed, listed
print(f"    lab: eval run {report['eval_run_id']} completed, 1/1 passed; listed by evals.list")
EOF

phase "operator: console login page and refusals"
# The pages need a session: /runs sends to the login; a token the (committed, empty) tokens
# file does not hold is refused (401); the login page itself answers.
"$PY" - "$CONSOLE_PORT" <<'EOF'
import sys, urllib.error, urllib.parse, urllib.request
base = f"http://127.0.0.1:{sys.argv[1]}"
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None
opener = urllib.request.build_opener(NoRedirect)
try:
    opener.open(f"{base}/runs", timeout=5)
except urllib.error.HTTPError as exc:
    assert exc.code == 303 and exc.headers["Location"].startswith("/login"), exc.code
else:
    raise AssertionError("/runs answered without a session")
with urllib.request.urlopen(f"{base}/login", timeout=5) as resp:
    assert resp.status == 200 and b'name="token"' in resp.read()
data = urllib.parse.urlencode({"token": "nxc_not-a-token", "next": "/runs"}).encode()
try:
    opener.open(f"{base}/login", data=data, timeout=5)
except urllib.error.HTTPError as exc:
    assert exc.code == 401, exc.code
else:
    raise AssertionError("the login took a token the tokens file does not hold")
print("    console: /runs 303 to the login, /login 200, a wrong token 401")
EOF

# ---- 6. NATS users and permissions, clean drain, down -----------------------------------
phase "checks, stop, down -v"
"$PY" - "$NATS_MONITOR_PORT" <<'EOF'
import json, sys, urllib.request
url = f"http://127.0.0.1:{sys.argv[1]}/connz?state=all&auth=true&limit=1000"
with urllib.request.urlopen(url, timeout=5) as resp:
    conns = json.load(resp)["connections"]
users = {}
for c in conns:
    users.setdefault(c.get("name", ""), set()).add(c.get("authorized_user", ""))
print("    NATS connections (name: users):", {k: sorted(v) for k, v in sorted(users.items())})
for service in (
    "core", "memory", "scheduler", "flows", "plane-sync", "channel-gateway", "console", "lab",
    "spend",
):
    assert users.get(service) == {service}, f"{service} connected as {users.get(service)}"
# Runners: no static user; each run's runner (named runner:<run id>) connects with its own
# run's credential (user run:<run id>, admitted by the scheduler's auth callout).
runners = {name: found for name, found in users.items() if name.startswith("runner:")}
assert runners, f"no runner connected: {sorted(users)}"
for name, found in runners.items():
    run_id = name.removeprefix("runner:")
    assert found == {f"run:{run_id}"}, f"{name} connected as {found}"
assert "runner" not in {u for found in users.values() for u in found}, users
assert users.get("nexus-cli") == {"admin"}, users.get("nexus-cli")
assert users.get("nexus-mcp") == {"mcp-read"}, users.get("nexus-mcp")
EOF
violations=$(compose logs --no-color nats | grep -c Violation || true)
[ "$violations" = 0 ] || die "NATS permission violations: $(compose logs --no-color nats | grep Violation | head -20)"
log "NATS log: no permission violation"
# Each container's PID 1 runs as the user its image sets: nexus (uid 10001) in the Nexus
# images, and the stand-ins as the real images they stand in for (nats:2.11-alpine runs as
# root; the postgres image drops to postgres; prom/prometheus is USER nobody).
declare -A RUNS_AS=([nats]=root [postgres]=postgres [prometheus]=nobody)
user_of() {  # SERVICE: the name of the user its container's PID 1 runs as
  $DOCKER exec "$(compose ps -q "$1")" sh -c \
    'awk -F: -v u="$(awk "/^Uid:/ {print \$2}" /proc/1/status)" "\$3 == u {print \$1}" /etc/passwd'
}
users=()
for svc in $services; do
  got=$(user_of "$svc")
  [ "$got" = "${RUNS_AS[$svc]:-nexus}" ] || die "$svc runs as '$got', not ${RUNS_AS[$svc]:-nexus}"
  users+=("$svc:$got")
done
log "users: ${users[*]}"
compose stop -t 60 >/dev/null 2>&1
for svc in core memory scheduler flows plane-sync channel-gateway console lab spend fake-plane fake-slack; do
  code=$($DOCKER inspect -f '{{.State.ExitCode}}' "$(compose ps -q "$svc")")
  [ "$code" = 0 ] || die "$svc exited $code on stop (not drained): $(compose logs --no-color --tail=30 "$svc")"
done
log "core, memory, scheduler, flows, plane-sync, channel-gateway, console, lab, spend and the fakes exited 0 on stop"
compose down -v --remove-orphans >/dev/null 2>&1
UP=0
