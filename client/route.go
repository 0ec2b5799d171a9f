package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// Route sends an application request straight to the node that owns key:
// it asks this client's server for the key's owner (GET /v1/owner), points
// req at the owner's advertised HTTP address (its path and query are
// kept; scheme as this client's) with the owner's fencing token in
// apitypes.HeaderToken, and sends it with this client's HTTP client. The
// owner's route middleware serves it only while it acts on the shard at
// exactly that epoch.
//
// When the owner answers 421 (ownership moved since the lookup), Route
// looks the owner up again and resends once, if req has no body or can
// replay it (req.GetBody, which http.NewRequest sets for in-memory
// bodies); otherwise the 421 answer is returned. Any other answer is
// returned as is: the caller reads and closes its body. Route adds no
// Authorization header to req (the application's endpoints are not
// tenure's API); set what your handlers need.
//
// Errors: ErrNoOwner when the shard has no valid owner or the owner
// advertises no address; the errors of Owner; *UnreachableError when the
// owner does not answer.
func (c *Client) Route(ctx context.Context, key string, req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		o, err := c.Owner(ctx, key)
		if err != nil {
			return nil, err
		}
		if o.Owner == "" || !o.Valid || o.State == "unowned" {
			return nil, fmt.Errorf("%w: key %q, shard %d (state %s, owner %q, valid %t)", ErrNoOwner, key, o.Shard, o.State, o.Owner, o.Valid)
		}
		if o.HTTPAddr == "" {
			return nil, fmt.Errorf("%w: key %q, shard %d: owner %s advertises no HTTP address", ErrNoOwner, key, o.Shard, o.Owner)
		}
		out := req.Clone(ctx)
		u := *req.URL
		u.Scheme, u.Host = c.base.Scheme, o.HTTPAddr
		if scheme, host, ok := strings.Cut(o.HTTPAddr, "://"); ok {
			u.Scheme, u.Host = scheme, host
		}
		out.URL, out.Host, out.RequestURI = &u, "", ""
		if attempt > 0 && req.Body != nil && req.Body != http.NoBody {
			if out.Body, err = req.GetBody(); err != nil {
				return nil, fmt.Errorf("client: replaying the request body: %w", err)
			}
		}
		out.Header.Set(apitypes.HeaderToken, apitypes.FormatRouteToken(o.Shard, o.Epoch))
		out.Header.Del(apitypes.HeaderForwarded)
		resp, err := c.hc.Do(out)
		if err != nil {
			return nil, &UnreachableError{Addr: u.Host, Err: err}
		}
		replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
		if resp.StatusCode != http.StatusMisdirectedRequest || attempt > 0 || !replayable {
			return resp, nil
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if ctx.Err() != nil {
			return nil, errors.Join(ctx.Err(), fmt.Errorf("client: owner %s of key %q moved", o.Owner, key))
		}
	}
}
