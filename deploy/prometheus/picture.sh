#!/bin/sh
# Photographs the Grafana dashboard's queries (deploy/grafana/tenure.json)
# against a `tenure demo` cluster, for docs/operations.md. Grafana is not
# packaged in Debian, so the picture is Prometheus' own graph page showing
# the dashboard's queries, one graph each (Debian's prometheus and chromium:
# apt-get install prometheus chromium), taken by the browser tests'
# headless chromium (cmd/tenure/browsertest, TestPrometheusDashboardPicture).
#
#   deploy/prometheus/picture.sh [OUT]   # writes OUT-1.png, OUT-2.png, …
#
# It runs the demo for about five minutes — jobs, two drains and a crash —
# so the graphs have something to show, then stops everything it started.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/docs/dashboard}
case $out in /*) ;; *) out=$PWD/$out ;; esac
listen=${PROMETHEUS_LISTEN:-127.0.0.1:9391}
for c in prometheus chromium go; do
	command -v "$c" >/dev/null || { echo "picture.sh: needs $c (apt-get install prometheus chromium)" >&2; exit 1; }
done
work=$(mktemp -d)
demo= prom=
cleanup() {
	[ -n "$prom" ] && kill "$prom" 2>/dev/null || true
	[ -n "$demo" ] && kill -INT "$demo" 2>/dev/null || true
	wait
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

(cd "$root" && go build -o "$work/tenure" ./cmd/tenure)
"$work/tenure" demo --dir "$work/demo" >"$work/demo.out" 2>&1 &
demo=$!
i=0
until grep -q '^  n5 ' "$work/demo.out"; do
	i=$((i + 1))
	[ $i -le 120 ] || { cat "$work/demo.out" >&2; echo "picture.sh: the demo did not start in 2 min" >&2; exit 1; }
	sleep 1
done
addr() { awk -v n="$1" '$1 == n { print $5 }' "$work/demo.out"; }
pid() { awk -v n="$1" '$1 == n { print $3 }' "$work/demo.out"; }
targets=$(for n in n1 n2 n3 n4 n5; do printf '"%s",' "$(addr $n)"; done)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 2s
  evaluation_interval: 2s
rule_files:
  - $root/deploy/prometheus/tenure-alerts.yaml
scrape_configs:
  - job_name: tenure
    static_configs:
      - targets: [${targets%,}]
EOF
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
	--web.listen-address="$listen" >"$work/prometheus.log" 2>&1 &
prom=$!

t=$work/tenure
sleep 30
for k in $(seq 1 40); do $t jobs enqueue --addr "$(addr n1)" --type demo --key "order-$k" >/dev/null; done
sleep 30
$t drain --addr "$(addr n4)"
sleep 20
$t drain --undo --addr "$(addr n4)"
sleep 30
for k in $(seq 41 80); do $t jobs enqueue --addr "$(addr n1)" --type demo --key "order-$k" >/dev/null; done
$t drain --addr "$(addr n2)"
sleep 20
$t drain --undo --addr "$(addr n2)"
sleep 30
kill -9 "$(pid n5)" # a crash: n5's shards fail over
sleep 60

cd "$root/cmd/tenure/browsertest"
TENURE_PROMETHEUS="http://$listen" TENURE_PICTURE="$out" go test -count=1 -run TestPrometheusDashboardPicture -v .
