package ledger

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestFSMHaltsOnUnreadableEntry: an entry this build cannot decode (a newer
// encoding version, an unknown kind, garbage) stops the replica at that
// index instead of skipping it: nothing after it is applied, snapshots are
// refused, the halt hook runs once, and HaltedAt names the entry.
func TestFSMHaltsOnUnreadableEntry(t *testing.T) {
	hb := func(n string) []byte {
		b, err := Encode(Heartbeat{Node: n, Incarnation: 1, Now: 1})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, bad := range map[string][]byte{
		"newer version": append([]byte{Version + 1}, hb("x")[1:]...),
		"unknown kind":  {Version, 200},
		"garbage":       {Version, byte(KindHeartbeat), 0xff, 0xff},
		"empty":         {},
	} {
		t.Run(name, func(t *testing.T) {
			f, err := NewFSM(DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			var halts []Halt
			f.OnHalt(func(h Halt) { halts = append(halts, h) })
			logs := []*raft.Log{
				{Index: 1, Type: raft.LogCommand, Data: hb("a")},
				{Index: 2, Type: raft.LogCommand, Data: bad},
				{Index: 3, Type: raft.LogCommand, Data: hb("b")},
			}
			out := f.ApplyBatch(logs)
			if r := out[0].(Result); r.Err != nil {
				t.Fatalf("entry 1: %v", r.Err)
			}
			for i := 1; i < 3; i++ {
				if r := out[i].(Result); !errors.Is(r.Err, ErrHalted) {
					t.Errorf("entry %d: %v, want ErrHalted", i+1, r.Err)
				}
			}
			f.ApplyBatch([]*raft.Log{{Index: 4, Type: raft.LogCommand, Data: hb("c")}})
			st := f.State()
			if st.AppliedIndex() != 1 {
				t.Errorf("applied index %d, want 1 (nothing from the halt on)", st.AppliedIndex())
			}
			if _, ok := st.Node("b"); ok {
				t.Error("an entry after the unreadable one was applied")
			}
			if _, ok := st.Node("a"); !ok {
				t.Error("the entry before the unreadable one was not applied")
			}
			h, ok := f.HaltedAt()
			if !ok || h.Index != 2 || len(halts) != 1 || halts[0].Index != 2 {
				t.Fatalf("HaltedAt = %+v, %v; hooks %+v; want index 2, one hook call", h, ok, halts)
			}
			if len(bad) > 0 && h.Version != bad[0] {
				t.Errorf("halt version %d, want %d", h.Version, bad[0])
			}
			if _, err := f.Snapshot(); !errors.Is(err, ErrHalted) {
				t.Errorf("Snapshot while halted: %v, want ErrHalted", err)
			}
		})
	}
}
