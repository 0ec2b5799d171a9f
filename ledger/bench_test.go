package ledger

import (
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkApplyBatch measures the FSM alone: one log entry of 128 job
// transitions (enqueue, start, complete cycles) per iteration, decoded and
// applied, with retention dropping old finished jobs.
func BenchmarkApplyBatch(b *testing.B) {
	f, _ := newTestFSM(b, DefaultConfig())
	f.ApplyCommand(1, Heartbeat{Node: "w", Incarnation: 1})
	for s := range uint32(128) {
		f.ApplyCommand(2, Grant{Shard: s, Owner: "w", OwnerIncarnation: 1, OwnerLiveness: 1})
	}
	index := uint64(2)
	var nextJob uint64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmds := make([]Command, 0, 128)
		for s := range uint32(128) {
			switch i % 3 {
			case 0:
				cmds = append(cmds, JobEnqueue{Shard: s, Now: int64(i)})
			case 1:
				cmds = append(cmds, JobStart{Shard: s, Epoch: 1, Owner: "w", Job: nextJob + uint64(s) + 1, Now: int64(i)})
			case 2:
				cmds = append(cmds, JobComplete{Shard: s, Epoch: 1, Job: nextJob + uint64(s) + 1, Attempt: 1, Now: int64(i)})
			}
		}
		if i%3 == 2 {
			nextJob += 128
		}
		index++
		data := MustEncode(Batch{Commands: cmds})
		r := f.ApplyBatch([]*raft.Log{{Index: index, Type: raft.LogCommand, Data: data}})[0].(Result)
		if r.Results[0].Err != nil {
			b.Fatal(r.Results[0].Err)
		}
	}
	b.ReportMetric(float64(b.N*128)/b.Elapsed().Seconds(), "commands/s")
}

// BenchmarkApplyCommand measures one command per entry with a State read
// after each, as the simulator drives replicas: a heartbeat and a job
// transition alternate.
func BenchmarkApplyCommand(b *testing.B) {
	f, _ := newTestFSM(b, DefaultConfig())
	f.ApplyCommand(1, Heartbeat{Node: "w", Incarnation: 1})
	for s := range uint32(64) {
		f.ApplyCommand(2, Grant{Shard: s, Owner: "w", OwnerIncarnation: 1, OwnerLiveness: 1})
	}
	for j := range 2000 {
		f.ApplyCommand(3, JobEnqueue{Shard: uint32(j % 64)})
	}
	index := uint64(3)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		index++
		var c Command = Heartbeat{Node: "w", Incarnation: 1, Now: int64(i)}
		if i%2 == 1 {
			c = JobEnqueue{Shard: uint32(i % 64), Now: int64(i)}
		}
		if r := f.ApplyCommand(index, c); r.Err != nil {
			b.Fatal(r.Err)
		}
		if _, ok := f.State().Node("w"); !ok {
			b.Fatal("no node")
		}
	}
}
