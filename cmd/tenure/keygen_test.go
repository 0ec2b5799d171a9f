package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

func TestKeygen(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range []int{16, 24, 32} {
		var out bytes.Buffer
		m := &Main{Stdout: &out, Stderr: &bytes.Buffer{}}
		if err := m.Run(context.Background(), []string{"keygen", "--bytes", strconv.Itoa(n)}); err != nil {
			t.Fatal(err)
		}
		s := strings.TrimSpace(out.String())
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil || len(k) != n || seen[s] {
			t.Fatalf("keygen --bytes %d printed %q (%d bytes, %v, repeated %v)", n, s, len(k), err, seen[s])
		}
		seen[s] = true
	}
	m := &Main{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}
	for _, bad := range [][]string{{"keygen", "--bytes", "20"}, {"keygen", "extra"}} {
		if err := m.Run(context.Background(), bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
