// Package sockaddr is tenure's wasip1 stand-in for
// github.com/hashicorp/go-sockaddr, written for the tier-3 simulator (a
// replace directive in simulation/tier3/go.mod; nothing else uses it). It
// provides exactly what memberlist v0.5.4 calls, for a process that has
// no network interfaces: tenure's in-memory transports advertise explicit
// addresses, so no lookup here ever has to succeed.
package sockaddr

import (
	"errors"
	"net"
	"net/netip"
)

// SockAddr is an address memberlist checks for being special-purpose.
type SockAddr interface{ String() string }

// IPAddr is an IP address.
type IPAddr struct{ addr netip.Addr }

func (a IPAddr) String() string { return a.addr.String() }

// NewIPAddr parses an IP address.
func NewIPAddr(s string) (IPAddr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return IPAddr{}, err
	}
	return IPAddr{addr: a}, nil
}

// IfAddr is an address on an interface.
type IfAddr struct {
	SockAddr
	Interface net.Interface
}

// IfByRFC splits addrs into those in the RFC's special-purpose ranges and
// the rest. Only RFC 6890 is known; there every private, loopback,
// link-local or unspecified address matches (memberlist only uses the
// answer to warn about public addresses without encryption).
func IfByRFC(rfc string, addrs []IfAddr) (matched, remainder []IfAddr, err error) {
	if rfc != "6890" {
		return nil, addrs, errors.New("sockaddr (wasip1 stand-in): only RFC 6890 is known")
	}
	for _, a := range addrs {
		ip, perr := netip.ParseAddr(a.String())
		if perr == nil && (ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()) {
			matched = append(matched, a)
		} else {
			remainder = append(remainder, a)
		}
	}
	return matched, remainder, nil
}

// ErrNoPrivateIP: wasip1 has no interfaces to find a private IP on.
var ErrNoPrivateIP = errors.New("sockaddr (wasip1 stand-in): no network interfaces; advertise an explicit address")

// GetPrivateIP fails: there are no interfaces.
func GetPrivateIP() (string, error) { return "", ErrNoPrivateIP }
