package ledger

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/hashicorp/raft"
)

// TestDataDriven runs the scripts in testdata/scripts/: each directive is one
// command applied to a fresh-per-file FSM (see applyDirective for the
// names and arguments); the expected output is the result. Regenerate with
// `go test ./ledger -run TestDataDriven -rewrite` and review the diff.
func TestDataDriven(t *testing.T) {
	datadriven.Walk(t, "testdata/scripts", func(t *testing.T, path string) {
		cfg := DefaultConfig()
		cfg.MaxPayload = 64
		f, err := NewFSM(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sm := newCounterSM()
		if err := f.RegisterStateMachine("counter", sm); err != nil {
			t.Fatal(err)
		}
		var index uint64
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			return applyDirective(t, f, sm, &index, d)
		})
	})
}

func applyDirective(t *testing.T, f *FSM, sm *counterSM, index *uint64, d *datadriven.TestData) string {
	args := map[string]string{}
	for _, a := range d.CmdArgs {
		args[a.Key] = strings.Join(a.Vals, ",")
	}
	used := map[string]bool{}
	str := func(k string) string { used[k] = true; return args[k] }
	u64 := func(k string) uint64 {
		used[k] = true
		v, ok := args[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", d.Pos, k, v, err)
		}
		return n
	}
	i64 := func(k string) int64 {
		used[k] = true
		v, ok := args[k]
		if !ok {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s=%q: %v", d.Pos, k, v, err)
		}
		return n
	}
	bytesArg := func(k string) []byte {
		v := str(k)
		if n, ok := strings.CutPrefix(v, "size:"); ok {
			size, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("%s: %s: %v", d.Pos, k, err)
			}
			return make([]byte, size)
		}
		if v == "" {
			return nil
		}
		return []byte(v)
	}
	var c Command
	switch d.Cmd {
	case "hb":
		c = Heartbeat{Node: str("node"), Incarnation: u64("inc"), Liveness: u64("live"), Now: i64("now")}
	case "expire":
		c = ExpireNode{Node: str("node"), Incarnation: u64("inc"), Liveness: u64("live"), Seq: u64("seq"), Now: i64("now")}
	case "drain":
		c = SetDraining{Node: str("node"), Incarnation: u64("inc"), Draining: str("on") != "false", Now: i64("now")}
	case "grant":
		c = Grant{Shard: uint32(u64("shard")), ExpectedEpoch: u64("expect"), Owner: str("owner"), OwnerIncarnation: u64("inc"),
			OwnerLiveness: u64("live"), Takeover: str("takeover") == "true", Now: i64("now"), Reason: str("reason")}
	case "revoke":
		c = Revoke{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Target: str("target"), Now: i64("now"), Reason: str("reason")}
	case "release":
		c = Release{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Owner: str("owner"), Now: i64("now"), Avoid: str("avoid") == "true"}
	case "transfer":
		c = Transfer{Shard: uint32(u64("shard")), Epoch: u64("epoch"), From: str("from"), To: str("to"), ToIncarnation: u64("inc"),
			ToLiveness: u64("live"), Now: i64("now"), Reason: str("reason")}
	case "enqueue":
		c = JobEnqueue{Shard: uint32(u64("shard")), Key: str("key"), Type: str("type"), Payload: bytesArg("payload"),
			MaxAttempts: uint32(u64("max")), Now: i64("now")}
	case "start":
		c = JobStart{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Owner: str("owner"), Job: u64("job"),
			Attempt: uint32(u64("attempt")), Timeout: i64("timeout"), Now: i64("now")}
	case "complete":
		c = JobComplete{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Job: u64("job"), Attempt: uint32(u64("attempt")),
			Result: bytesArg("result"), Now: i64("now")}
	case "fail":
		c = JobFail{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Job: u64("job"), Attempt: uint32(u64("attempt")),
			Error: str("error"), Backoff: i64("backoff"), Now: i64("now")}
	case "app":
		c = App{Shard: uint32(u64("shard")), Epoch: u64("epoch"), Type: str("type"), Payload: bytesArg("payload"), Now: i64("now")}
	case "settings":
		c = Settings{JobRetention: i64("retention"), MaxFinishedJobs: uint32(u64("maxfinished")),
			DefaultMaxAttempts: uint32(u64("maxattempts")), Now: i64("now")}
	case "declare":
		c = DeclareElection{Group: str("group"), Name: str("name"), Partitions: uint32(u64("partitions")), Now: i64("now")}
	case "cluster":
		c = ClusterConfig{Name: str("name"), Partitions: uint32(u64("partitions")), Version: uint32(u64("version")), Now: i64("now")}
	case "pin":
		c = PinShard{Shard: uint32(u64("shard")), Node: str("node"), Reason: str("reason"), Now: i64("now")}
	case "exclude":
		c = ExcludeNode{Node: str("node"), Exclude: str("off") != "true", Reason: str("reason"), Now: i64("now")}
	case "policy":
		c = SetTakeoverPolicy{First: uint32(u64("first")), Last: uint32(u64("last")), Fenced: str("off") != "true", Now: i64("now")}
	case "fenced":
		var b strings.Builder
		for _, r := range f.State().FencedRanges() {
			fmt.Fprintf(&b, "fenced %d..%d\n", r.First, r.Last)
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "rules":
		var b strings.Builder
		for _, p := range f.State().Pins() {
			fmt.Fprintf(&b, "pin s%d -> %s (%s) at=%d\n", p.Shard, p.Node, p.Reason, p.At)
		}
		for _, e := range f.State().Excluded() {
			fmt.Fprintf(&b, "excluded %s (%s) at=%d\n", e.Node, e.Reason, e.At)
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "elections":
		var b strings.Builder
		fmt.Fprintf(&b, "partitions=%d\n", f.State().Partitions())
		for _, e := range f.State().Elections() {
			b.WriteString(fmtElection(e) + "\n")
		}
		if e, ok := f.State().Election(str("group"), str("name")); ok {
			b.WriteString("found " + fmtElection(e) + "\n")
		}
		return b.String()
	case "raw":
		// Bytes straight into the raft entry point, as a corrupt log entry.
		b, err := hex.DecodeString(str("hex"))
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		// Bytes that do not decode are refused before they are proposed
		// (the leader's CheckCommand); a replica that met them in its log
		// would halt (TestFSMHaltsOnUnreadableEntry), so they are shown
		// as Decode's error and not applied.
		if _, err := Decode(b); err != nil {
			return fmtResult(nil, Result{Err: err})
		}
		*index++
		r := f.Apply(&raft.Log{Index: *index, Type: raft.LogCommand, Data: b}).(Result)
		return fmtResult(nil, r)
	case "jobs":
		var b strings.Builder
		for st := JobPending; st <= JobDead; st++ {
			for _, j := range f.State().Jobs(uint32(u64("shard")), st) {
				b.WriteString(fmtJob(j) + "\n")
			}
		}
		return b.String()
	case "runnable":
		var b strings.Builder
		for _, j := range f.State().RunnableJobs(uint32(u64("shard")), i64("now")) {
			b.WriteString(fmtJob(j) + "\n")
		}
		if b.Len() == 0 {
			return "none\n"
		}
		return b.String()
	case "state":
		var b strings.Builder
		for _, n := range f.State().Nodes() {
			b.WriteString(fmtNode(n) + "\n")
		}
		for _, r := range f.State().Shards() {
			fmt.Fprintf(&b, "%s valid=%v\n", fmtShard(r), f.State().OwnershipValid(r))
		}
		fmt.Fprintf(&b, "jobs=%d\n", f.State().NumJobs())
		return b.String()
	case "applog":
		return fmt.Sprintf("%v\n", sm.logs[uint32(u64("shard"))])
	default:
		t.Fatalf("%s: unknown directive %q", d.Pos, d.Cmd)
	}
	for k := range args {
		if !used[k] {
			t.Fatalf("%s: unknown argument %q for %s", d.Pos, k, d.Cmd)
		}
	}
	b, err := Encode(c)
	if err != nil {
		return "encode: " + err.Error()
	}
	dc, err := Decode(b)
	if err != nil {
		t.Fatalf("%s: decode of encoded %T: %v", d.Pos, c, err)
	}
	*index++
	r := f.Apply(&raft.Log{Index: *index, Type: raft.LogCommand, Data: b}).(Result)
	_ = dc
	return fmtResult(c, r)
}
