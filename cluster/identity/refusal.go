package identity

import gometrics "github.com/hashicorp/go-metrics/compat"

// CountRefusal counts a refused connection or request of the Raft/RPC
// port by reason (tenure_control_conn_refused_total{reason}): the limits
// before authentication, a failed handshake, a revoked peer.
func CountRefusal(reason string) {
	gometrics.IncrCounterWithLabels([]string{"control", "conn_refused"}, 1, []gometrics.Label{{Name: "reason", Value: reason}})
}
