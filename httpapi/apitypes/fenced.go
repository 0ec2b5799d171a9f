package apitypes

// FencedRange is a range of shards First..Last (inclusive) under fenced
// takeover.
type FencedRange struct {
	First uint32 `json:"first"`
	Last  uint32 `json:"last"`
}

// FencedPolicy is GET /v1/fenced: the shards under fenced takeover,
// disjoint ranges sorted by First (docs/guarantees.md: S4 is waived for
// them).
type FencedPolicy struct {
	Ranges []FencedRange `json:"ranges"`
}

// FencedRequest is POST /v1/fenced: put shards First..Last under fenced
// takeover (Fenced true) or back under the lease rule (false).
type FencedRequest struct {
	First  uint32 `json:"first"`
	Last   uint32 `json:"last"`
	Fenced bool   `json:"fenced"`
}
