package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Several processes open a new database at once (the service test starts
// three): every open succeeds. Without the retry on SQLITE_BUSY the switch
// to WAL fails in some of them ("database is locked (5)", seen in CI).
func TestOpenStoreFromManyProcesses(t *testing.T) {
	if path := os.Getenv("TENURE_STORE_OPEN"); path != "" {
		st, err := OpenStore(path)
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	for round := range 10 {
		path := filepath.Join(t.TempDir(), "orders.db")
		const n = 6
		cmds := make([]*exec.Cmd, n)
		outs := make([]bytes.Buffer, n)
		for i := range n {
			cmds[i] = exec.Command(os.Args[0], "-test.run=^TestOpenStoreFromManyProcesses$", "-test.count=1")
			cmds[i].Env = append(os.Environ(), "TENURE_STORE_OPEN="+path)
			cmds[i].Stdout, cmds[i].Stderr = &outs[i], &outs[i]
			if err := cmds[i].Start(); err != nil {
				t.Fatal(err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Fatalf("round %d: process %d of %d failed to open %s: %v\n%s", round, i, n, path, err, outs[i].String())
			}
		}
	}
}
