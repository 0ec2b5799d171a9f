// Offline validation of the Kubernetes manifests in this directory: every
// YAML document decodes strictly into the typed k8s.io/api structs, and the
// invariants docs/operations.md relies on hold. A module of its own so the
// library's go.mod stays free of k8s.io.
module github.com/tenurehq/tenure/deploy/kubernetes

go 1.26.0

require (
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)
