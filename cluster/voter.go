package cluster

import (
	"fmt"
	"sort"
)

// VoterPreference is what a node asks of the control group about its own
// place among the voters. It travels in gossip (Meta.Tags[TagVoter]) so
// whichever node leads honours it; docs/control-group.md, "Voter
// placement".
type VoterPreference string

// The voter preferences.
const (
	// VoterAuto (or "") leaves it to the control group: a caught-up
	// non-voter is promoted, lowest id first, while there are fewer than
	// MaxVoters voters.
	VoterAuto VoterPreference = "auto"
	// VoterAlways asks to be a voter: such nodes are chosen first, both as
	// bootstrap voters and for promotion.
	VoterAlways VoterPreference = "always"
	// VoterNever asks never to vote: the node is never a bootstrap voter
	// nor promoted, and a voter that starts gossiping it is demoted once a
	// replacement is caught up.
	VoterNever VoterPreference = "never"
)

// TagVoter is the Meta.Tags key that carries a node's VoterPreference
// (absent: VoterAuto).
const TagVoter = "tenure.voter"

// TagStream is the Meta.Tags key a node sets (to "1") when its binary
// follows the committed-state stream out of Raft (cluster version 5). The
// leader keeps only such nodes out of the Raft configuration: an older
// binary, which cannot follow the stream, is added as a non-voter as
// before — so it learns the log and is refused by version, as it always
// was.
const TagStream = "tenure.stream"

// followsStream reports whether m's binary can follow the stream.
func followsStream(m Meta) bool { return m.Tags[TagStream] != "" }

// ParseVoterPreference accepts "", "auto", "always" and "never".
func ParseVoterPreference(s string) (VoterPreference, error) {
	switch p := VoterPreference(s); p {
	case "", VoterAuto:
		return VoterAuto, nil
	case VoterAlways, VoterNever:
		return p, nil
	}
	return "", fmt.Errorf("voter preference %q: want auto, always or never", s)
}

// VoterPreferenceOf reads a member's gossiped preference; a missing or
// unknown value is VoterAuto (an older release gossips none).
func VoterPreferenceOf(m Meta) VoterPreference {
	p, err := ParseVoterPreference(m.Tags[TagVoter])
	if err != nil {
		return VoterAuto
	}
	return p
}

// voterRank orders promotion candidates: always before auto; never is not a
// candidate (ok false).
func voterRank(p VoterPreference) (rank int, ok bool) {
	switch p {
	case VoterAlways:
		return 0, true
	case VoterNever:
		return 0, false
	}
	return 1, true
}

// rankVoterCandidates drops members that refuse to vote and orders the rest
// always-first, then by id. It sorts in place and returns the kept prefix.
func rankVoterCandidates(ms []Member) []Member {
	out := ms[:0]
	for _, m := range ms {
		if _, ok := voterRank(VoterPreferenceOf(m.Meta)); ok {
			out = append(out, m)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		ri, _ := voterRank(VoterPreferenceOf(out[i].Meta))
		rj, _ := voterRank(VoterPreferenceOf(out[j].Meta))
		if ri != rj {
			return ri < rj
		}
		return out[i].ID < out[j].ID
	})
	return out
}
