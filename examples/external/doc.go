// Package external is the external-module test of issue 13: a service in
// its own module (this one, github.com/tenurehq/tenure/examples, which
// requires tenure through a replace directive as any embedder would)
// embeds node and httpapi on the real network, and the tenure CLI (built
// from ../cmd/tenure) and package client work against it. It uses only
// tenure's exported API.
package external
