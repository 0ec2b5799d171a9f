// Package httpapi serves a tenure node over HTTP: the versioned JSON API
// (/v1/status, shards, owner, members, elections, moves, jobs,
// drain/undrain, keyring, upgrade), /healthz, /readyz, Prometheus /metrics
// and the dashboard — what the tenure agent serves, for a service that
// embeds package node to mount on its own mux:
//
//	api, err := httpapi.New(n, httpapi.Options{Token: writeToken, ReadToken: readToken})
//	if err != nil { ... }
//	defer api.Close()
//	mux.Handle("/", api) // or mux.Handle("/v1/", api), "/metrics", ...
//
// Package client (github.com/tenurehq/tenure/client) and the tenure CLI
// talk to it. docs/api.md describes every endpoint.
package httpapi
