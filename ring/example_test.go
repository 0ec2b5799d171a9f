package ring_test

import (
	"fmt"

	"github.com/tenurehq/tenure/ring"
)

func Example() {
	cfg := ring.DefaultConfig()
	before, err := ring.New(cfg, []string{"node-b", "node-a", "node-c"})
	if err != nil {
		panic(err)
	}
	after, err := ring.New(cfg, []string{"node-a", "node-b", "node-c", "node-d"})
	if err != nil {
		panic(err)
	}
	shard := cfg.ShardFor([]byte("tenant-42"))
	fmt.Println("owner is a member:", before.Owner(shard) != "")
	fmt.Println("members:", after.Members())
	fmt.Println("max load within bound:", after.MaxLoad() <= 320)
	moves := ring.Diff(before, after)
	fmt.Println("some shards move:", len(moves) > 0 && len(moves) < cfg.Partitions)
	// Output:
	// owner is a member: true
	// members: [node-a node-b node-c node-d]
	// max load within bound: true
	// some shards move: true
}
