package identity

import (
	"bytes"
	"io"
	"net"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"

	"github.com/tenurehq/tenure/cluster/internal/raftwire"
)

// An InstallSnapshot that announces more bytes than MaxInstallSnapshot is
// refused before one byte of it reaches raft (snapshot_too_large); one
// within the cap passes with its bytes.
func TestRaftGuardBoundsInstallSnapshot(t *testing.T) {
	const max = 4 << 10
	cfg := raftwire.EncodeConfig("n1:V", "n2:V", "n3:V")
	for _, tc := range []struct {
		size int64
		ok   bool
	}{{max, true}, {max + 1, false}, {1 << 40, false}} {
		g := &Guard{maxSnapshot: max, view: RaftView{
			Configuration: func() raft.Configuration { return raft.DecodeConfiguration(cfg) },
			Term:          func() uint64 { return 5 },
			Leader:        func() string { return "n1" },
			Self:          "n2",
		}}
		req := raft.InstallSnapshotRequest{RPCHeader: raft.RPCHeader{ID: []byte("n1"), Addr: []byte("n1")}, SnapshotVersion: raft.SnapshotVersionMax,
			Term: 5, Leader: []byte("n1"), LastLogIndex: 10, LastLogTerm: 5, Size: tc.size, Configuration: cfg, ConfigurationIndex: 1}
		var in bytes.Buffer
		in.WriteByte(raftwire.InstallSnapshot)
		if err := codec.NewEncoder(&in, &codec.MsgpackHandle{}).Encode(&req); err != nil {
			t.Fatal(err)
		}
		header := in.Len()
		in.Write(bytes.Repeat([]byte{7}, int(min(tc.size, max+1))))
		client, server := net.Pipe()
		go func() { _, _ = client.Write(in.Bytes()); _ = client.Close() }()
		var out bytes.Buffer
		err := runRaftGuard(server, &out, Peer{ID: "n1", Role: RoleNode}, g)
		_ = server.Close()
		switch {
		case tc.ok && err != io.EOF:
			t.Errorf("InstallSnapshot of %d bytes (cap %d): %v, want it passed", tc.size, max, err)
		case tc.ok && out.Len() != header+int(tc.size):
			t.Errorf("InstallSnapshot of %d bytes: raft got %d bytes, want %d", tc.size, out.Len(), header+int(tc.size))
		case !tc.ok && refusalReason(err) != refusedSnapshotTooLarge:
			t.Errorf("InstallSnapshot of %d bytes (cap %d): %v, want refused as %s", tc.size, max, err, refusedSnapshotTooLarge)
		case !tc.ok && out.Len() != 0:
			t.Errorf("InstallSnapshot of %d bytes: %d bytes reached raft before the refusal", tc.size, out.Len())
		}
	}
}
