package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/internal/mutation"
)

// VersionRevocation is the cluster version from which an operator can
// revoke one node's identity (RevokeNode, encoding and snapshot version 7):
// the committed deny-list every node checks at every handshake on its
// Raft/RPC port, in both directions (docs/security.md, "Revoking a node").
// Before it is active the leader proposes none and the FSM refuses one.
const VersionRevocation uint32 = 5

// KindRevokeNode is the wire kind of RevokeNode (encoding version 7).
const KindRevokeNode Kind = 24

// encodingRevocation and snapshotRevocation are the encoding and snapshot
// versions that carry RevokeNode and the deny-list (the version-5
// versions, shared with the jobs API).
const (
	encodingRevocation byte = 7
	snapshotRevocation byte = 7
)

// MaxRevocations bounds the deny-list.
const MaxRevocations = 4096

// ErrRevoked: the node (or certificate) is on the committed deny-list
// (RevokeNode). A revoked node's heartbeats and claims are refused and
// every node refuses its connections.
var ErrRevoked = errors.New("ledger: node revoked")

// RevokeNode puts a node id, a certificate serial, or both on the
// committed deny-list (Lift takes that entry off again). A revoked id is
// refused at every handshake whatever certificate it presents, and the
// planner treats it as excluded (it owns nothing) and the FSM refuses its
// heartbeats and incarnation claims; a revoked serial is refused whatever
// id its certificate names (a leaked key of a node that got a new
// certificate). Serial is the certificate's serial number in lowercase hex
// without leading zeros (NormalizeSerial). Operator-only (Authorize).
type RevokeNode struct {
	Node   string
	Serial string
	Reason string
	Lift   bool
	Now    int64
}

func (RevokeNode) kind() Kind { return KindRevokeNode }

func init() {
	register(kindSpec[RevokeNode]{
		kind: KindRevokeNode, name: "RevokeNode", since: encodingRevocation,
		fields: func(cd codec, c RevokeNode) RevokeNode {
			cd.walk(limited{"node", &c.Node}, limited{"serial", &c.Serial}, limited{"reason", &c.Reason},
				&c.Lift, &c.Now)
			return c
		},
		apply:      func(f *FSM, _ uint64, c RevokeNode) Result { return f.revokeNode(c) },
		who:        whoOperator,
		authorize:  func(a authz, _ RevokeNode) error { return a.operator() },
		sessionNow: func(c RevokeNode) int64 { return c.Now },
		touches: func(c RevokeNode) ([]string, []uint32) {
			if c.Node == "" {
				return nil, nil
			}
			return []string{c.Node}, nil
		},
		format: func(c RevokeNode) string {
			verb := "revoke"
			if c.Lift {
				verb = "lift revocation of"
			}
			return fmt.Sprintf("%s node=%q serial=%q", verb, c.Node, c.Serial)
		},
	})
}

// Revocation is one deny-list entry: a node id, a certificate serial, or
// both (then a connection is refused when either matches).
type Revocation struct {
	Node   string
	Serial string
	Reason string
	At     int64 // unix ns the command was proposed
}

// NormalizeSerial is the form a serial takes on the deny-list: lowercase
// hex, no colons or spaces, no leading zeros ("" stays "").
func NormalizeSerial(s string) string {
	s = strings.ToLower(serialSeparators.Replace(s))
	if t := strings.TrimLeft(s, "0"); t != "" || s == "" {
		return t
	}
	return "0"
}

var serialSeparators = strings.NewReplacer(":", "", " ", "", "0x", "", "0X", "")

// Revocations returns the deny-list, sorted by node then serial.
func (s *State) Revocations() []Revocation { return slices.Clone(s.revoked) }

// Revoked reports whether a peer proving node id (with a certificate of
// serial, normalized by NormalizeSerial; "" when unknown) is denied: its
// id or its serial is on the list. This is the one decision every
// handshake check calls (and every later read and write of an
// authenticated connection: it allocates nothing).
func (s *State) Revoked(node, serial string) (Revocation, bool) {
	if len(s.revoked) == 0 {
		return Revocation{}, false
	}
	i, ok := s.revokedIdx[node]
	if !ok || node == "" {
		if i, ok = s.revokedIdx["\x00"+serial]; !ok || serial == "" {
			return Revocation{}, false
		}
	}
	return s.revoked[i], true
}

// setRevoked replaces the deny-list with list (sorted, never modified
// afterwards) and its index: node ids, and serials behind a NUL byte
// (which no node id holds), to the position of their first entry.
func (s *State) setRevoked(list []Revocation) {
	s.revoked, s.revokedIdx = list, make(map[string]int, 2*len(list))
	for i, r := range list {
		for _, k := range []string{r.Node, "\x00" + r.Serial} {
			if _, dup := s.revokedIdx[k]; !dup && k != "" && k != "\x00" {
				s.revokedIdx[k] = i
			}
		}
	}
}

// PlacementExcluded is what the planner keeps out of placement
// (ownership.Input.Excluded): the operator's exclusions and every revoked
// node id (reason "revoked: …"), sorted by node. A revoked node owns
// nothing: its shards are revoked and granted away as for an exclusion.
func (s *State) PlacementExcluded() []ExcludeRecord {
	out := s.Excluded()
	for _, r := range s.revoked {
		if r.Node != "" && !s.IsExcluded(r.Node) {
			out = append(out, ExcludeRecord{Node: r.Node, Reason: "revoked: " + r.Reason, At: r.At})
		}
	}
	slices.SortFunc(out, func(a, b ExcludeRecord) int { return cmp.Compare(a.Node, b.Node) })
	return slices.CompactFunc(out, func(a, b ExcludeRecord) bool { return a.Node == b.Node })
}

// revokedNode reports whether node id is revoked (by id: the ledger does
// not know its serials).
func (s *State) revokedNode(node string) bool {
	_, ok := s.revokedIdx[node]
	return ok && node != ""
}

func (f *FSM) revokeNode(c RevokeNode) Result {
	if !f.st.VersionActive(VersionRevocation) && !mutation.On(mutation.GatedWhileMixed) {
		return Result{Err: errf(ErrVersion, "revoking nodes needs cluster version %d; the cluster runs %d",
			VersionRevocation, f.st.ActiveVersion())}
	}
	e := Revocation{Node: c.Node, Serial: NormalizeSerial(c.Serial), Reason: c.Reason, At: c.Now}
	if e.Node == "" && e.Serial == "" {
		return Result{Err: errf(ErrInvalid, "revocation without a node id or a certificate serial")}
	}
	i, had := slices.BinarySearchFunc(f.st.revoked, e, cmpRevocation)
	switch {
	case had != c.Lift:
		return Result{Duplicate: true}
	case c.Lift:
		f.st.setRevoked(slices.Delete(slices.Clone(f.st.revoked), i, i+1))
	case len(f.st.revoked) >= MaxRevocations:
		return Result{Err: errf(ErrTooLarge, "revocation of %q/%q: %d entries already (at most %d)", e.Node, e.Serial, len(f.st.revoked), MaxRevocations)}
	default:
		f.st.setRevoked(slices.Insert(slices.Clone(f.st.revoked), i, e))
	}
	f.dirty |= dirtyShards | dirtyNodes
	f.feedAll()
	return Result{}
}

func cmpRevocation(a, b Revocation) int {
	return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Serial, b.Serial))
}

// writeSnapshotRevocations and readSnapshotRevocations carry the
// deny-list in snapshots of version snapshotRevocation (last section
// before the applications).
func writeSnapshotRevocations(w *writer, s *State) {
	w.u(uint64(len(s.revoked)))
	for _, e := range s.revoked {
		w.str(e.Node)
		w.str(e.Serial)
		w.str(e.Reason)
		w.i(e.At)
	}
}

func readSnapshotRevocations(r *reader, s *State, count func() uint64) {
	defer func() { s.setRevoked(s.revoked) }()
	for n := count(); n > 0 && r.err == nil; n-- {
		e := Revocation{Node: r.str(), Serial: r.str(), Reason: r.str(), At: r.i()}
		if r.err != nil {
			return
		}
		if k := len(s.revoked); (e.Node == "" && e.Serial == "") || (k > 0 && cmpRevocation(s.revoked[k-1], e) >= 0) || k >= MaxRevocations {
			r.fail(fmt.Errorf("%w: snapshot revocation %q/%q: empty, out of order or too many", ErrMalformed, e.Node, e.Serial))
			return
		}
		s.revoked = append(s.revoked, e)
	}
}
