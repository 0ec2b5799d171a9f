package simulation_test

import (
	"fmt"
	"strconv"

	"github.com/tenurehq/tenure/ledger"
	"github.com/tenurehq/tenure/simulation"
)

// sumSM is an application state machine: the sum of the numbers applied to
// each shard.
type sumSM struct{ sum map[uint32]int }

func (m *sumSM) Apply(shard uint32, epoch, index uint64, payload []byte) ([]byte, error) {
	v, err := strconv.Atoi(string(payload))
	if err != nil {
		return nil, err
	}
	m.sum[shard] += v
	return nil, nil
}

func (m *sumSM) Snapshot() ([]byte, error) {
	var b []byte
	for s := range uint32(16) {
		b = fmt.Appendf(b, "%d:%d;", s, m.sum[s])
	}
	return b, nil
}

func (m *sumSM) Restore(b []byte) error { m.sum = map[uint32]int{}; return nil }

// Run an application's state machine and worker under the simulator, with
// random faults; every safety checker runs, and every replica must end with
// the same application state.
func ExampleRun() {
	cfg := simulation.DefaultConfig(42)
	cfg.Workload = false // only the application's own work
	cfg.StateMachines = map[string]func() ledger.StateMachine{
		"app.sum": func() ledger.StateMachine { return &sumSM{sum: map[uint32]int{}} },
	}
	cfg.Workers = []simulation.Worker{simulation.WorkerFunc(
		func(node string, shard uint32, epoch uint64, st *ledger.State, now int64) []ledger.Command {
			// Fenced by the epoch this node acts under: a deposed owner's
			// command is rejected by the ledger (S2).
			return []ledger.Command{ledger.App{Shard: shard, Epoch: epoch, Type: "app.sum", Payload: []byte("1"), Now: now}}
		})}
	res, err := simulation.Run(cfg)
	if err != nil {
		panic(err)
	}
	fmt.Println("violations:", len(res.Violations))
	// Output: violations: 0
}
