// Package route sends an application's HTTP requests to the node that owns
// their key.
//
// New wraps an application handler in a middleware. For each request it
// extracts the key (Options.Key), maps it to a shard and then:
//
//   - serves the request locally when this node acts as the shard's owner
//     right now, with the fencing token in the request's context
//     (TokenFrom), for the handler to pass with every write it makes;
//   - otherwise forwards it, once, to the committed owner's advertised
//     address (node.Node.OwnerAddr), marking it with apitypes.HeaderForwarded
//     and the token the owner is believed to hold in apitypes.HeaderToken.
//
// A request that carries a token (forwarded by a peer, or sent straight to
// the owner by client.Client.Route) is served only if the receiving node
// acts on that shard at exactly that epoch; otherwise it is refused with
// 421 and a JSON apitypes.RouteError naming the owner this node knows. A
// forwarded request is never forwarded again, so a stale view can cost at
// most one extra hop and an error, never a loop. 503 means the shard has
// no owner that can serve now (failover or handoff in progress, owner
// unreachable): retry after the Retry-After seconds.
//
// What the token check gives, and what it does not, is in docs/api.md
// ("Routing to the owner"): a request is served only by a node that held
// the shard at the epoch the router committed to when the request
// arrived; ownership can still move while the handler runs, which the
// handler's fenced writes (the token from TokenFrom) catch downstream.
//
// The package lives beside httpapi rather than inside it because it wraps
// the application's own routes, not tenure's API: it has no auth tokens of
// its own (the application's middleware runs inside it) and an embedder
// who mounts no API can still route.
package route
