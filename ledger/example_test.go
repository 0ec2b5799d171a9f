package ledger_test

import (
	"errors"
	"fmt"

	"github.com/tenurehq/tenure/ledger"
)

// A node registers, is granted a shard, runs a job; a retried grant (after
// an unknown outcome) cannot create a second owner.
func Example() {
	f, err := ledger.NewFSM(ledger.DefaultConfig())
	if err != nil {
		panic(err)
	}
	index := uint64(0)
	apply := func(c ledger.Command) ledger.Result {
		index++
		return f.ApplyCommand(index, c) // with raft: raft.Apply(ledger.Encode(c)) or a Batcher
	}
	hb := apply(ledger.Heartbeat{Node: "n1", Incarnation: 1})
	grant := ledger.Grant{Shard: 7, ExpectedEpoch: 0, Owner: "n1", OwnerIncarnation: 1, OwnerLiveness: hb.Node.Liveness}
	r := apply(grant)
	fmt.Println("granted epoch", r.Shard.Epoch)
	if r := apply(grant); errors.Is(r.Err, ledger.ErrStaleEpoch) {
		fmt.Println("retry rejected; owner is", r.Shard.Owner, "at epoch", r.Shard.Epoch)
	}
	job := apply(ledger.JobEnqueue{Shard: 7, Key: "invoice-42"}).Job
	started := apply(ledger.JobStart{Shard: 7, Epoch: 1, Owner: "n1", Job: job.ID, Attempt: job.Attempt}).Job
	fmt.Println("token", started.Token())
	apply(ledger.JobComplete{Shard: 7, Epoch: 1, Job: job.ID, Attempt: started.Attempt})
	rec, _ := f.State().ValidOwner(7)
	fmt.Println(rec.Owner, len(f.State().Jobs(7, ledger.JobCompleted)), "completed")
	// Output:
	// granted epoch 1
	// retry rejected; owner is n1 at epoch 1
	// token 1/1
	// n1 1 completed
}
