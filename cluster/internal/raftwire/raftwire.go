// Package raftwire holds what tenure knows of hashicorp/raft's wire
// format: the NetworkTransport's message types, which the Raft guard
// (cluster/identity) reads and cluster's tests send as an attacker would,
// and EncodeConfig, a configuration entry written the way raft writes one
// (for the guard's tests and cluster's).
package raftwire

import (
	"strings"

	"github.com/hashicorp/raft"
)

// The transport's message types (hashicorp/raft net_transport.go; stable
// since the wire format is shared across raft versions).
const (
	AppendEntries   byte = 0
	RequestVote     byte = 1
	InstallSnapshot byte = 2
	TimeoutNow      byte = 3
	RequestPreVote  byte = 4
)

// EncodeConfig encodes servers given as "id:V|N|S@addr" (addr defaults to
// id) the way raft writes a configuration entry.
func EncodeConfig(servers ...string) []byte {
	var c raft.Configuration
	for _, s := range servers {
		id, rest, _ := strings.Cut(s, ":")
		kind, addr, _ := strings.Cut(rest, "@")
		if addr == "" {
			addr = id
		}
		suf := map[string]raft.ServerSuffrage{"V": raft.Voter, "N": raft.Nonvoter, "S": raft.Staging}[kind]
		c.Servers = append(c.Servers, raft.Server{Suffrage: suf, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	return raft.EncodeConfiguration(c)
}
