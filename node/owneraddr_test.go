package node

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// OwnerAddr names the owner's advertised address and committed token from
// every node, and says why when there is none to route to.
func TestOwnerAddr(t *testing.T) {
	net := NewMemNetwork()
	a := startMem(t, net, "a", func(c *Config) { c.HTTPAddr = "127.0.0.1:8001" })
	b := startMem(t, net, "b") // advertises no address
	ctx := testCtx(t)
	for _, n := range []*Node{a, b} {
		if err := n.WaitSettled(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var sawA, sawB bool
	for k := range 64 {
		key := fmt.Sprintf("k%d", k)
		sh := a.ShardFor(key)
		owner := a.Shard(sh).Owner
		for _, n := range []*Node{a, b} {
			addr, tok, err := n.OwnerAddr(key)
			switch owner {
			case "a":
				sawA = true
				if err != nil || addr != "127.0.0.1:8001" || tok != a.Shard(sh).Token() {
					t.Fatalf("%s: OwnerAddr(%s) = %q %v %v, want a's address at %v", n.ID(), key, addr, tok, err, a.Shard(sh).Token())
				}
			case "b":
				sawB = true
				if !errors.Is(err, ErrNoAddress) || addr != "" {
					t.Fatalf("%s: OwnerAddr(%s) owned by b = %q %v, want ErrNoAddress", n.ID(), key, addr, err)
				}
			default:
				t.Fatalf("key %s: owner %q in a settled cluster", key, owner)
			}
		}
	}
	if !sawA || !sawB {
		t.Fatalf("keys landed on a: %v, on b: %v; want both", sawA, sawB)
	}
	_ = a.Close(context.Background())
	if _, _, err := a.OwnerAddr("k1"); !errors.Is(err, ErrClosed) {
		t.Fatalf("OwnerAddr after Close: %v, want ErrClosed", err)
	}
}
