package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestControlConfigValidate(t *testing.T) {
	valid := func() ControlConfig {
		c := TestControlConfig()
		c.NodeID = "n1"
		c.BindAddr = "127.0.0.1:0"
		c.FSM = &testFSM{}
		s := raft.NewInmemStore()
		c.LogStore, c.StableStore, c.SnapshotStore = s, s, raft.NewInmemSnapshotStore()
		return c
	}
	for _, profile := range []func() ControlConfig{DefaultControlConfig, FastControlConfig, TestControlConfig} {
		c := profile()
		v := valid()
		c.NodeID, c.BindAddr, c.FSM, c.LogStore, c.StableStore, c.SnapshotStore = v.NodeID, v.BindAddr, v.FSM, v.LogStore, v.StableStore, v.SnapshotStore
		if err := c.Validate(); err != nil {
			t.Fatalf("profile invalid: %v", err)
		}
	}
	mem := NewRaftMemNetwork(1)
	cases := []struct {
		mod  func(*ControlConfig)
		want string
	}{
		{func(c *ControlConfig) { c.NodeID = "" }, "NodeID"},
		{func(c *ControlConfig) { c.BindAddr = "" }, "BindAddr is empty"},
		{func(c *ControlConfig) { c.BindAddr = "0.0.0.0:7000" }, `"0.0.0.0:7000" is unspecified`},
		{func(c *ControlConfig) { c.BindAddr = "nonsense" }, `BindAddr "nonsense"`},
		{func(c *ControlConfig) { c.Transport = mem.Transport("a:1") }, "without a StreamLayer"},
		{func(c *ControlConfig) { c.Transport, c.StreamLayer = mem.Transport("a:1"), mem.StreamLayer("b:1") }, `"a:1" differs`},
		{func(c *ControlConfig) { c.MaxVoters = 4 }, "MaxVoters = 4"},
		{func(c *ControlConfig) { c.BootstrapExpect = 5 }, "BootstrapExpect = 5"},
		{func(c *ControlConfig) { c.FSM = nil }, "FSM"},
		{func(c *ControlConfig) { c.LeaderLeaseTimeout = time.Second }, "LeaderLeaseTimeout = 1s"},
		{func(c *ControlConfig) { c.ElectionTimeout = 100 * time.Millisecond }, "ElectionTimeout 100ms < HeartbeatTimeout 300ms"},
		{func(c *ControlConfig) { c.ReconcileInterval = 0 }, "ReconcileInterval 0s"},
		{func(c *ControlConfig) { c.DeadVoterTimeout = time.Millisecond }, "DeadVoterTimeout = 1ms"},
		{func(c *ControlConfig) { c.SnapshotThreshold = 0 }, "SnapshotThreshold 0"},
	}
	for _, tc := range cases {
		c := valid()
		tc.mod(&c)
		err := c.Validate()
		if !errors.Is(err, ErrBadControlConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want ErrBadControlConfig mentioning %q", err, tc.want)
		}
		if _, err := NewControlGroup(c, nil); err == nil {
			t.Errorf("NewControlGroup accepted invalid config (%s)", tc.want)
		}
	}
}
