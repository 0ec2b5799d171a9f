package raftstore

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/ledger"
)

// counterSM is a test application state machine: per shard, the payloads
// applied, in order.
type counterSM struct {
	logs map[uint32][]string
}

func (c *counterSM) Apply(shard uint32, epoch, _ uint64, payload []byte) ([]byte, error) {
	c.logs[shard] = append(c.logs[shard], fmt.Sprintf("%s@%d", payload, epoch))
	return nil, nil
}

func (c *counterSM) Snapshot() ([]byte, error) { return json.Marshal(c.logs) }

func (c *counterSM) Restore(b []byte) error {
	c.logs = map[uint32][]string{}
	if b == nil {
		return nil
	}
	return json.Unmarshal(b, &c.logs)
}

func newTestFSM(t interface{ Fatal(...any) }, cfg ledger.Config) (*ledger.FSM, *counterSM) {
	f, err := ledger.NewFSM(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sm := &counterSM{logs: map[uint32][]string{}}
	if err := f.RegisterStateMachine("counter", sm); err != nil {
		t.Fatal(err)
	}
	return f, sm
}

func fastRaftConfig(id string) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(id)
	cfg.HeartbeatTimeout = 100 * time.Millisecond
	cfg.ElectionTimeout = 100 * time.Millisecond
	cfg.LeaderLeaseTimeout = 100 * time.Millisecond
	cfg.CommitTimeout = 5 * time.Millisecond
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})
	cfg.BatchApplyCh = true
	return cfg
}

// dumpState renders the replicated tables a restart must bring back (not
// the applied index: the barrier and the new term's entries move it on).
func dumpState(s *ledger.State) string {
	return fmt.Sprintf("nodes %+v\nshards %+v\njobs %+v\nsettings %+v", s.Nodes(), s.Shards(), s.AllJobs(), s.Settings())
}
