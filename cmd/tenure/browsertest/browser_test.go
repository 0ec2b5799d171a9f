package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/httpapi/apitypes"
	"github.com/tenurehq/tenure/httpapi/httpapitest"
	"github.com/tenurehq/tenure/node"
	"net/http/httptest"
)

// The dashboard's browser tests drive Debian's chromium headless through
// chromedp. They skip where no chromium is installed. They live in a module
// of their own so the library's go.mod does not depend on chromedp; the
// Makefile's test target runs them.

// chromiumPath finds a Chromium or Chrome binary, or skips the test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TENURE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("browser test skipped: no chromium binary found (install Debian's `chromium` package, or set TENURE_CHROMIUM)")
	return ""
}

// browser starts headless chromium and returns a chromedp context.
func browser(t *testing.T, timeout time.Duration) context.Context {
	t.Helper()
	path := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1400, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, timeout)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// shardOwners reads the owner of every cell of the dashboard's shard grid.
func shardOwners(ctx context.Context) ([]string, error) {
	var owners []string
	err := chromedp.Run(ctx, chromedp.Evaluate(`Array.from(document.querySelectorAll('#shard-grid .shard')).map(e => e.dataset.owner || "")`, &owners))
	return owners, err
}

// checkDashboard loads the dashboard at url, checks the shard grid shows
// partitions shards with some on drainee, calls drain and waits until the
// grid shows none on drainee, then saves a screenshot.
func checkDashboard(t *testing.T, ctx context.Context, url string, partitions int, drainee string, drain func()) {
	t.Helper()
	if err := chromedp.Run(ctx,
		chromedp.Navigate(url),
		chromedp.WaitVisible(`#shard-grid .shard`, chromedp.ByQuery),
		chromedp.WaitVisible(`#members tbody tr`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	waitOwners := func(what string, ok func([]string) bool) []string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			owners, err := shardOwners(ctx)
			if err != nil {
				t.Fatalf("reading the shard grid: %v", err)
			}
			if ok(owners) {
				return owners
			}
			if time.Now().After(deadline) {
				t.Fatalf("dashboard never showed %s; grid owners: %v", what, owners)
			}
			<-time.After(100 * time.Millisecond)
		}
	}
	count := func(owners []string, id string) int {
		n := 0
		for _, o := range owners {
			if o == id {
				n++
			}
		}
		return n
	}
	waitOwners(fmt.Sprintf("%d shards with some on %s", partitions, drainee), func(o []string) bool {
		return len(o) == partitions && count(o, drainee) > 0
	})
	drain()
	waitOwners("no shard on "+drainee+" after the drain", func(o []string) bool {
		return len(o) == partitions && count(o, drainee) == 0 && count(o, "") == 0
	})
	var moves string
	if err := chromedp.Run(ctx, chromedp.Text(`#moves tbody`, &moves, chromedp.ByQuery)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(moves, drainee) {
		t.Errorf("timeline does not mention the drained node %s: %q", drainee, moves)
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("TENURE_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshot: %s (%d bytes)", p, len(png))
}

// TestDashboardBrowserFake runs the dashboard against the API over the
// fake node: the grid renders and follows a drain.
func TestDashboardBrowserFake(t *testing.T) {
	ctx := browser(t, 90*time.Second)
	f := httpapitest.NewNode()
	hs := httptest.NewServer(newFakeAPI(t, f, httpapi.Options{}))
	t.Cleanup(hs.Close)
	srv := hs.URL
	waitFor(t, 10*time.Second, "the API to subscribe", func() bool { return f.Subscribers() > 0 })
	// The fake's shard 7 is unowned; give it to n3 so "no unowned cell"
	// can be checked after the drain.
	f.SetShard(apitypes.Shard{Shard: 7, Owner: "n3", Epoch: 4, State: "owned", Valid: true, Reason: "grant"})
	checkDashboard(t, ctx, srv+"/", 8, "n1", func() {
		if err := f.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
	})
}

// TestE2EDashboardBrowser loads the dashboard of a running 3-node demo
// cluster in headless chromium, drains a node and sees the shard grid
// follow.
func TestE2EDashboardBrowser(t *testing.T) {
	chromiumPath(t)
	const partitions = 16
	bin := tenureBinary(t)
	d := startDemo(t, bin, 3, partitions)
	ctx := browser(t, 120*time.Second)
	checkDashboard(t, ctx, d.dashboard, partitions, d.drainee, func() {
		if out, err := exec.Command(bin, "drain", "--addr", d.draineeHTTP).CombinedOutput(); err != nil {
			t.Fatalf("drain: %v %s", err, out)
		}
	})
}

// TestE2EDashboardBrowserKill loads the dashboard of a running 3-node demo
// cluster in headless chromium, kill -9s the node the demo suggests
// crashing and sees its member row turn suspected or dead within its lease
// (plus one dashboard refresh), before the control group has expired it,
// and then its shards leave it with none unowned.
func TestE2EDashboardBrowserKill(t *testing.T) {
	chromiumPath(t)
	const partitions = 16
	bin := tenureBinary(t)
	d := startDemo(t, bin, 3, partitions)
	ctx := browser(t, 120*time.Second)
	rowState := func() (string, error) {
		var s string
		err := chromedp.Run(ctx, chromedp.Evaluate(fmt.Sprintf(`(document.querySelector('#members tr[data-member=%q]') || {dataset: {}}).dataset.state || ""`, d.victim), &s))
		return s, err
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(d.dashboard),
		chromedp.WaitVisible(`#members tbody tr`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}
	waitFor(t, 60*time.Second, "the dashboard shows "+d.victim+" alive and owning shards", func() bool {
		s, err := rowState()
		if err != nil || s != "alive" {
			return false
		}
		owners, err := shardOwners(ctx)
		return err == nil && slices.Contains(owners, d.victim)
	})

	lease, _ := node.ProfileFast.Timing() // tenure demo's default profile
	const pollMS = 1000                   // httpapi/dashboard/app.js POLL_MS
	bound := lease.Lease + pollMS*time.Millisecond
	killedAt := time.Now()
	if err := syscall.Kill(d.victimPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d (%s): %v", d.victimPID, d.victim, err)
	}
	var shown string
	waitFor(t, 30*time.Second, "the dashboard shows "+d.victim+" suspected or dead", func() bool {
		s, err := rowState()
		if err != nil {
			return false
		}
		if s == "suspected" || s == "suspect" || s == "dead" {
			shown = s
			return true
		}
		return false
	})
	took := time.Since(killedAt)
	t.Logf("kill -9 %s → dashboard shows %q after %v (lease %v, refresh %dms)", d.victim, shown, took.Round(time.Millisecond), lease.Lease, pollMS)
	if took > bound {
		t.Errorf("the dashboard showed %s %s %v after kill -9: want within its lease (%v) plus one refresh (%dms)", d.victim, shown, took, lease.Lease, pollMS)
	}
	// Then its shards fail over: the grid shows none on it and none unowned.
	waitFor(t, 60*time.Second, "the grid shows no shard on "+d.victim+" and none unowned", func() bool {
		owners, err := shardOwners(ctx)
		if err != nil || len(owners) != partitions {
			return false
		}
		for _, o := range owners {
			if o == d.victim || o == "" {
				return false
			}
		}
		return true
	})
}
