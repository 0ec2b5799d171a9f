// Tier 3 of the simulator: the tier-2 scenarios compiled for wasip1 and run
// under wazero with fixed randomness and clocks, so real raft and real
// memberlist replay byte-identically per seed. A module of its own so the
// library's go.mod stays free of wazero.
module github.com/tenurehq/tenure/simulation/tier3

go 1.25.0

require (
	github.com/tenurehq/tenure v0.0.0-00010101000000-000000000000
	github.com/tetratelabs/wazero v1.9.0
)

require (
	github.com/armon/go-metrics v0.4.1 // indirect
	github.com/boltdb/bolt v1.3.1 // indirect
	github.com/buraksezer/consistent v0.10.0 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fatih/color v1.13.0 // indirect
	github.com/google/btree v1.1.3 // indirect
	github.com/hashicorp/errwrap v1.1.0 // indirect
	github.com/hashicorp/go-hclog v1.6.2 // indirect
	github.com/hashicorp/go-immutable-radix v1.0.0 // indirect
	github.com/hashicorp/go-metrics v0.5.4 // indirect
	github.com/hashicorp/go-msgpack/v2 v2.1.5 // indirect
	github.com/hashicorp/go-multierror v1.1.1 // indirect
	github.com/hashicorp/go-sockaddr v1.0.7 // indirect
	github.com/hashicorp/golang-lru v0.5.0 // indirect
	github.com/hashicorp/memberlist v0.5.4 // indirect
	github.com/hashicorp/raft v1.7.3 // indirect
	github.com/hashicorp/raft-boltdb/v2 v2.3.1 // indirect
	github.com/mattn/go-colorable v0.1.12 // indirect
	github.com/mattn/go-isatty v0.0.14 // indirect
	github.com/miekg/dns v1.1.68 // indirect
	github.com/sean-/seed v0.0.0-20170313163322-e2103e2c3529 // indirect
	go.etcd.io/bbolt v1.4.3 // indirect
	golang.org/x/mod v0.28.0 // indirect
	golang.org/x/net v0.47.0 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	golang.org/x/tools v0.37.0 // indirect
)

replace github.com/tenurehq/tenure => ../..

// go-sockaddr does not build for wasip1; memberlist needs four of its
// identifiers (see sockaddrstub).
replace github.com/hashicorp/go-sockaddr => ./sockaddrstub
