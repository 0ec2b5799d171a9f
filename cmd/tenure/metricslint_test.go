package main

import (
	"context"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tenurehq/tenure/httpapi"
)

var updateSeries = flag.Bool("update-series", false, "rewrite deploy/prometheus/series.txt from a live scrape (TestAgentMetricsLint)")

// seriesFile lists every tenure_* series the agent exports; the
// deploy/prometheus module's test checks the alert rules and the Grafana
// dashboard against it, and TestAgentMetricsLint that it is current.
const seriesFile = "../../deploy/prometheus/series.txt"

// TestAgentMetricsLint starts real agents — three voters (one of them the
// control group's leader) and a member (--voter=never) — scrapes each
// one's /metrics and fails on any promlint problem (the rules of
// `promtool check metrics`), on any go-metrics key the bridge does not
// know, and when deploy/prometheus/series.txt is not what they export.
func TestAgentMetricsLint(t *testing.T) {
	dc := startCluster(t, 3, 16)
	member := addMember(t, dc, "n4")
	if err := dc.waitReady(context.Background(), 90*time.Second); err != nil {
		t.Fatal(err)
	}
	var leader string
	waitFor(t, 30*time.Second, "a control-group leader", func() bool {
		st, err := getJSON[struct {
			ControlLeader string `json:"control_leader"`
		}](dc.agents[0].http, "/v1/status")
		leader = st.ControlLeader
		return err == nil && leader != ""
	})
	roles := map[string]*demoAgent{"member": member}
	for _, a := range dc.agents[:3] {
		if a.id == leader {
			roles["leader"] = a
		} else if roles["voter"] == nil {
			roles["voter"] = a
		}
	}
	if roles["leader"] == nil || roles["voter"] == nil {
		t.Fatalf("leader %q is not one of the voters", leader)
	}
	// A few commits (the renewals and heartbeats at rest make some, a job
	// makes more) so the raft histograms have observations.
	resp, err := e2eClient.Post("http://"+roles["leader"].http+"/v1/jobs", "application/json", strings.NewReader(`{"type":"lint","key":"lint-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	union := map[string]dto.MetricType{}
	for _, role := range []string{"leader", "voter", "member"} {
		a := roles[role]
		var families map[string]*dto.MetricFamily
		waitFor(t, 20*time.Second, role+" exports the control group's term", func() bool {
			families = scrape(t, a.http)
			term := value(families, "tenure_control_term")
			return role == "member" || term > 0
		})
		raw := scrapeRaw(t, a.http)
		t.Logf("%s (%s): /metrics has %d families, %d lines, %d bytes", role, a.id, len(families), strings.Count(raw, "\n"), len(raw))
		problems, err := promlint.New(strings.NewReader(raw)).Lint()
		if err != nil {
			t.Fatalf("%s (%s): promlint: %v", role, a.id, err)
		}
		for _, p := range problems {
			t.Errorf("%s (%s): promlint: %s: %s", role, a.id, p.Metric, p.Text)
		}
		if n := value(families, "tenure_gometrics_unmapped_total"); n != 0 {
			t.Errorf("%s (%s): %v go-metrics reports with a key the bridge does not know (httpapi/gometrics.go bridgeTable)", role, a.id, n)
		}
		wantLeader := 0.0
		if role == "leader" {
			wantLeader = 1
		}
		if got := value(families, "tenure_control_leader"); got != wantLeader {
			t.Errorf("%s (%s): tenure_control_leader = %v, want %v", role, a.id, got, wantLeader)
		}
		for name, mf := range families {
			if strings.HasPrefix(name, "tenure_") {
				union[name] = mf.GetType()
			}
		}
	}
	if got := value(scrape(t, roles["leader"].http), "tenure_raft_commit_duration_seconds"); got == 0 {
		t.Errorf("leader: tenure_raft_commit_duration_seconds has no observations")
	}
	checkSeriesFile(t, union)
}

// addMember starts one more agent beside dc's, --voter=never, with a
// certificate from dc's CA.
func addMember(t *testing.T, dc *demoCluster, id string) *demoAgent {
	t.Helper()
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := filepath.Join(dc.dir, "tls")
	quiet := &Main{Stdout: io.Discard, Stderr: io.Discard}
	if err := quiet.Run(context.Background(), []string{"tls", "cert", "--dir", tlsDir, "--node", id}); err != nil {
		t.Fatal(err)
	}
	a := &demoAgent{id: id,
		gossip:  "127.0.0.1:" + strconv.Itoa(ports[0]),
		raft:    "127.0.0.1:" + strconv.Itoa(ports[1]),
		http:    "127.0.0.1:" + strconv.Itoa(ports[2]),
		logPath: filepath.Join(dc.dir, id+".log"),
		exited:  make(chan struct{}),
	}
	set := map[string]string{"--node-id": a.id, "--data-dir": filepath.Join(dc.dir, a.id),
		"--gossip-addr": a.gossip, "--raft-addr": a.raft, "--http-addr": a.http,
		"--tls-cert": filepath.Join(tlsDir, a.id+".pem"), "--tls-key": filepath.Join(tlsDir, a.id+"-key.pem")}
	args := slices.Clone(dc.agents[len(dc.agents)-1].args)
	for i := 0; i+1 < len(args); i++ {
		if v, ok := set[args[i]]; ok {
			args[i+1] = v
			delete(set, args[i])
		}
	}
	if len(set) != 0 {
		t.Fatalf("the demo's agents lack flags %v", set)
	}
	a.args = append(args, "--voter=never")
	dc.agents = append(dc.agents, a)
	if err := dc.startAgent(a, dc.exe); err != nil {
		t.Fatal(err)
	}
	return a
}

func scrapeRaw(t *testing.T, addr string) string {
	t.Helper()
	resp, err := e2eClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %v %s", addr, err, resp.Status)
	}
	return string(b)
}

func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(scrapeRaw(t, addr)))
	if err != nil {
		t.Fatalf("%s/metrics: %v", addr, err)
	}
	return families
}

// value is a family's single value: a gauge's or counter's, a histogram's
// count; summed over label values.
func value(families map[string]*dto.MetricFamily, name string) float64 {
	total := 0.0
	for _, m := range families[name].GetMetric() {
		switch {
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total
}

// seriesLines expands families into the series names a query can use
// (a histogram's _bucket, _sum and _count), one "name type" per line.
func seriesLines(families map[string]dto.MetricType) []string {
	var out []string
	for name, typ := range families {
		kind := strings.ToLower(typ.String())
		switch typ {
		case dto.MetricType_HISTOGRAM:
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				out = append(out, name+s+" "+kind)
			}
		case dto.MetricType_SUMMARY:
			for _, s := range []string{"", "_sum", "_count"} {
				out = append(out, name+s+" "+kind)
			}
		default:
			out = append(out, name+" "+kind)
		}
	}
	slices.Sort(out)
	return out
}

// optionalSeries appear only once something happens (a node that reports
// no load has no hottest shard); the file always lists them.
var optionalSeries = map[string]dto.MetricType{"tenure_hot_shard_load": dto.MetricType_GAUGE}

func checkSeriesFile(t *testing.T, families map[string]dto.MetricType) {
	t.Helper()
	header := "# The tenure_* series a tenure agent exports (voter, leader and member\n" +
		"# together): name and type, one a line. Written by TestAgentMetricsLint\n" +
		"# (cmd/tenure: go test -run TestAgentMetricsLint ./cmd/tenure/ -args\n" +
		"# -update-series), which fails when it is not current; the test of\n" +
		"# deploy/prometheus checks the alert rules and deploy/grafana's dashboard\n" +
		"# against it.\n"
	old, err := os.ReadFile(seriesFile)
	if err != nil && !*updateSeries {
		t.Fatalf("%s: %v (write it with -update-series)", seriesFile, err)
	}
	// The bridge's histograms appear at their first observation (a member
	// never has a commit latency): the file lists every bridged series.
	for name, typ := range httpapi.BridgedSeries() {
		mt := dto.MetricType(dto.MetricType_value[strings.ToUpper(typ)])
		if got, ok := families[name]; ok && got != mt {
			t.Errorf("%s is a %v, the bridge table says %v", name, got, mt)
		}
		families[name] = mt
	}
	for name, typ := range optionalSeries {
		if got, ok := families[name]; ok && got != typ {
			t.Errorf("%s is a %v, optionalSeries says %v", name, got, typ)
		}
		families[name] = typ
	}
	want := header + strings.Join(seriesLines(families), "\n") + "\n"
	if *updateSeries {
		if err := os.WriteFile(seriesFile, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if string(old) != want {
		oldLines := strings.Split(string(old), "\n")
		wantLines := strings.Split(want, "\n")
		var diff []string
		for _, l := range wantLines {
			if !slices.Contains(oldLines, l) {
				diff = append(diff, "+ "+l)
			}
		}
		for _, l := range oldLines {
			if !slices.Contains(wantLines, l) {
				diff = append(diff, "- "+l)
			}
		}
		t.Errorf("%s is not current (rewrite it: go test -run TestAgentMetricsLint ./cmd/tenure/ -args -update-series):\n%s", seriesFile, strings.Join(diff, "\n"))
	}
}
