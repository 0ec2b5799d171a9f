package apitypes

import (
	"fmt"
	"strconv"
	"strings"
)

// Request routing (package route, client.Client.RouteRequest): the headers
// a routed application request carries. They are part of the API's wire
// contract, so the middleware and the client share these definitions.
const (
	// HeaderToken carries the fencing token "shard/epoch" the sender
	// believes the receiving node holds for the request's key. The
	// receiver serves the request only if it acts on that shard at exactly
	// that epoch right now.
	HeaderToken = "Tenure-Token"
	// HeaderForwarded marks a request a node forwarded to the owner; its
	// value is the forwarding node's id. A request carrying it is never
	// forwarded again (one hop).
	HeaderForwarded = "Tenure-Forwarded"
	// HeaderServedBy names the node that served a routed request (set on
	// every answer the middleware gives, served or refused).
	HeaderServedBy = "Tenure-Served-By"
	// MaxTokenHeader bounds HeaderToken's value: two decimal integers.
	MaxTokenHeader = 64
	// MaxForwardedHeader bounds HeaderForwarded's value (a node id).
	MaxForwardedHeader = 256
)

// RouteError is the JSON body of a routed request the middleware refused
// (421, 503, 400, 413, 502). Owner and HTTPAddr name the committed owner
// as the answering node saw it, when it knows one, so a caller can retry
// there.
type RouteError struct {
	Error string `json:"error"`
	// Code is one of the RouteCode values.
	Code     string `json:"code"`
	Shard    uint32 `json:"shard"`
	Owner    string `json:"owner,omitempty"`
	Epoch    uint64 `json:"epoch,omitempty"`
	HTTPAddr string `json:"http_addr,omitempty"`
}

// The RouteError codes.
const (
	// RouteNotOwner (421): the request carried a token this node does not
	// hold right now, or was forwarded to a node that does not act on the
	// shard; it was not served.
	RouteNotOwner = "not_owner"
	// RouteNoOwner (503): the shard has no acting owner reachable from here
	// (failover in progress, owner without an address, owner unreachable).
	RouteNoOwner = "no_owner"
	// RouteBadRequest (400): a routing header or the key is malformed.
	RouteBadRequest = CodeInvalid
	// RouteTooLarge (413): the body is over the forwarding limit.
	RouteTooLarge = CodeTooLarge
)

// FormatRouteToken renders a token for HeaderToken.
func FormatRouteToken(shard uint32, epoch uint64) string {
	return strconv.FormatUint(uint64(shard), 10) + "/" + strconv.FormatUint(epoch, 10)
}

// ParseRouteToken parses HeaderToken's value "shard/epoch" (decimal, epoch
// > 0). It never panics; the error says what is wrong.
func ParseRouteToken(v string) (shard uint32, epoch uint64, err error) {
	if len(v) > MaxTokenHeader {
		return 0, 0, fmt.Errorf("%s: %d bytes, want at most %d", HeaderToken, len(v), MaxTokenHeader)
	}
	s, e, ok := strings.Cut(v, "/")
	if !ok {
		return 0, 0, fmt.Errorf("%s %q: want shard/epoch", HeaderToken, v)
	}
	sh, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("%s %q: shard: want a 32-bit unsigned integer", HeaderToken, v)
	}
	ep, err := strconv.ParseUint(e, 10, 64)
	if err != nil || ep == 0 {
		return 0, 0, fmt.Errorf("%s %q: epoch: want a positive 64-bit integer", HeaderToken, v)
	}
	return uint32(sh), ep, nil
}
