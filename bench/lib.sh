# Shell helpers shared by bench/run.sh and bench/callgrind.sh; sourced, not run.
# The sourcing script sets BENCH_TAG (the prefix of its messages) first.

say() { printf '[%s %s] %s\n' "$BENCH_TAG" "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    say "error: $*"
    exit 1
}

# wait_http URL PID LOG [SECONDS]: waits (bounded, default 30 s) until `curl URL`
# succeeds; fails when the process PID died first, showing the end of its LOG.
wait_http() {
    local url=$1 pid=$2 log=$3 seconds=${4:-30}
    for _ in $(seq 1 $((seconds * 5))); do
        curl -fsS -o /dev/null "$url" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "process behind $url exited (log: $log)"; }
        sleep 0.2
    done
    tail -n 20 "$log" >&2
    die "$url did not answer within $seconds s"
}

# ports_free HINT PORT...: fails when something already listens on one of the ports on
# 127.0.0.1; HINT names the variable that moves them.
ports_free() {
    local hint=$1
    shift
    for port in "$@"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            die "127.0.0.1:$port is already taken; set $hint"
        fi
    done
}
