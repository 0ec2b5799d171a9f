package external

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/client"
	"github.com/tenurehq/tenure/examples/internal/proc"
	"github.com/tenurehq/tenure/httpapi"
	"github.com/tenurehq/tenure/node"
)

const token = "external-test-token"

// service is one embedding process's worth: a node on real sockets and
// httpapi mounted on the service's own mux beside its own route.
type service struct {
	n    *node.Node
	addr string
}

func startServices(t *testing.T, ctx context.Context, count int) []*service {
	t.Helper()
	var lns []net.Listener
	var gossip []string
	for range count {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		gossip = append(gossip, proc.FreeAddr(t))
	}
	svcs := make([]*service, count)
	errs := make([]error, count)
	var wg sync.WaitGroup
	for i := range count {
		cfg := node.ConfigFromEnv(func(string) string { return "" })
		cfg.NodeID, cfg.Profile, cfg.Partitions, cfg.BootstrapExpect = fmt.Sprintf("e%d", i+1), node.ProfileFast, 8, count
		cfg.DataDir, cfg.GossipAddr, cfg.RaftAddr, cfg.Seeds = t.TempDir(), gossip[i], proc.FreeAddr(t), gossip
		cfg.HTTPAddr = lns[i].Addr().String()
		cfg.Logger = slog.New(slog.DiscardHandler)
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := node.Start(ctx, cfg)
			if err == nil {
				svcs[i] = &service{n: n, addr: cfg.HTTPAddr}
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, s := range svcs {
			if s != nil {
				cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_ = s.n.Close(cctx)
				cancel()
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, s := range svcs {
		api, err := httpapi.New(s.n, httpapi.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = api.Close() })
		mux := http.NewServeMux()
		mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello from", s.n.ID()) })
		mux.Handle("/", api)
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(lns[i]) }()
		t.Cleanup(func() { _ = srv.Close() })
	}
	for _, s := range svcs {
		if err := s.n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return svcs
}

// tenure runs the CLI binary with TENURE_ADDR and TENURE_TOKEN set.
func tenure(t *testing.T, ctx context.Context, bin, addr string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "TENURE_ADDR="+addr, "TENURE_TOKEN="+token)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestCLIAndClientAgainstEmbeddedServices(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CLI and starts real nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	bin := proc.Build(t, filepath.Join("..", "..", "cmd", "tenure"), "tenure")
	svcs := startServices(t, ctx, 3)

	// The CLI, against a service (not a tenure agent).
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"status"}, []string{"e1 (group", "e1, e2, e3"}},
		{[]string{"members"}, []string{"e1", "e2", "e3", svcs[2].addr}},
		{[]string{"shards"}, []string{"SHARD", "OWNER"}},
		{[]string{"jobs", "enqueue", "--type", "email", "--key", "msg-1"}, []string{"enqueued job"}},
		{[]string{"jobs", "list"}, []string{"pending 1"}},
	} {
		out, err := tenure(t, ctx, bin, svcs[0].addr, c.args...)
		if err != nil {
			t.Fatalf("tenure %v: %v\n%s", c.args, err, out)
		}
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Fatalf("tenure %v: no %q in\n%s", c.args, w, out)
			}
		}
	}
	if out, err := tenure(t, ctx, bin, svcs[1].addr, "--version"); err != nil || out == "" {
		t.Fatalf("tenure --version: %v %q", err, out)
	}

	// The client, from a process that is not a member.
	c, err := client.New(svcs[1].addr, client.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Node != "e2" || len(st.Members) != 3 {
		t.Fatalf("client status: %+v %v", st, err)
	}
	// The job the CLI enqueued through e1 is visible through e2, and an
	// enqueue with the same key is the same job.
	job, created, err := c.EnqueueJob(ctx, client.JobRequest{Type: "email", Key: "msg-1"})
	if err != nil || created {
		t.Fatalf("re-enqueue of msg-1: created=%v %v", created, err)
	}
	got, err := c.Job(ctx, job.ID)
	if err != nil || got.Key != "msg-1" {
		t.Fatalf("job %s: %+v %v", job.ID, got, err)
	}
	o, err := c.Owner(ctx, "tenant-7")
	if err != nil || o.Owner == "" || o.HTTPAddr == "" {
		t.Fatalf("owner of tenant-7: %+v %v", o, err)
	}
	for _, s := range svcs {
		if s.n.ID() == o.Owner && s.addr != o.HTTPAddr {
			t.Fatalf("owner %s advertises %s, want %s", o.Owner, o.HTTPAddr, s.addr)
		}
	}
	if _, err := client.New(svcs[0].addr, client.Options{}); err != nil {
		t.Fatal(err)
	}
	noTok, _ := client.New(svcs[0].addr, client.Options{})
	if _, err := noTok.Status(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("status without the token: %v, want ErrUnauthorized", err)
	}
	// The service's own routes still answer beside the API.
	resp, err := http.Get("http://" + svcs[2].addr + "/hello")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the service's own route: %v %v", resp, err)
	}
	resp.Body.Close()
}
