package browsertest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestPrometheusDashboardPicture photographs the queries of the Grafana
// dashboard (deploy/grafana/tenure.json) in Prometheus' own graph page,
// one graph per panel query, for docs/operations.md: no Grafana can be
// installed where this repository is built (it is not packaged in Debian),
// while Debian's prometheus is. It runs only when TENURE_PROMETHEUS names
// a Prometheus that scrapes a cluster under job "tenure" (deploy/prometheus/
// picture.sh sets one up against `tenure demo`) and writes the PNG to
// TENURE_PICTURE-1.png, -2.png, … (ten queries a page; default: a temp
// dir). The queries are the dashboard's
// own, with its variables bound as Grafana binds them ($job: every job,
// $__rate_interval: 1m); nothing else is drawn.
func TestPrometheusDashboardPicture(t *testing.T) {
	prom := os.Getenv("TENURE_PROMETHEUS")
	if prom == "" {
		t.Skip("set TENURE_PROMETHEUS to a Prometheus scraping a tenure cluster (deploy/prometheus/picture.sh)")
	}
	exprs, err := dashboardQueries(filepath.Join("..", "..", "..", "deploy", "grafana", "tenure.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("TENURE_PICTURE")
	if out == "" {
		out = filepath.Join(t.TempDir(), "dashboard")
	}
	ctx := browser(t, 5*time.Minute)
	// The classic graph page (Debian's Prometheus serves it) sorts its
	// g<N>. parameters as strings, so one page holds ten graphs: g0..g9.
	for page, start := 1, 0; start < len(exprs); page, start = page+1, start+10 {
		chunk := exprs[start:min(start+10, len(exprs))]
		q := url.Values{}
		for i, e := range chunk {
			g := fmt.Sprintf("g%d.", i)
			q.Set(g+"expr", e)
			q.Set(g+"tab", "0")
			q.Set(g+"range_input", "10m")
		}
		// It decodes with decodeURIComponent, which leaves '+' alone.
		link := strings.TrimRight(prom, "/") + "/graph?" + strings.ReplaceAll(q.Encode(), "+", "%20")
		if err := chromedp.Run(ctx, chromedp.EmulateViewport(1400, 1000), chromedp.Navigate(link)); err != nil {
			t.Fatal(err)
		}
		// A graph that got data draws a Rickshaw legend, one that got
		// none shows an alert.
		waitFor(t, time.Minute, fmt.Sprintf("page %d: %d graphs drawn", page, len(chunk)), func() bool {
			var n int
			err := chromedp.Run(ctx, chromedp.Evaluate(`document.querySelectorAll('.rickshaw_legend').length + Array.from(document.querySelectorAll('.alert-danger')).filter(e => e.style.display !== 'none' && e.textContent.trim() !== '').length`, &n))
			return err == nil && n >= len(chunk)
		})
		var png []byte
		if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		p := fmt.Sprintf("%s-%d.png", out, page)
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("queries %d..%d of %d: %s (%d bytes)", start+1, start+len(chunk), len(exprs), p, len(png))
	}
}

// dashboardQueries returns every panel query of a Grafana dashboard JSON,
// in panel order, with $job and $__rate_interval bound.
func dashboardQueries(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct {
		Panels []struct {
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	bind := strings.NewReplacer(`"$job"`, `".*"`, "$__rate_interval", "1m")
	var out []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, bind.Replace(tg.Expr))
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no panel queries", path)
	}
	return out, nil
}
