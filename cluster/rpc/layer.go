package rpc

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
)

// StreamLayer is the connection layer shared by Raft and the control RPC: a
// listener plus a dialer. NewTCPStreamLayer is plain TCP; NewTLSStreamLayer
// wraps any StreamLayer in TLS; RaftMemNetwork.StreamLayer is in memory.
type StreamLayer interface {
	net.Listener
	// Dial opens a connection to addr (host:port), honouring ctx's deadline.
	Dial(ctx context.Context, addr string) (net.Conn, error)
}

// NewTCPStreamLayer listens on bindAddr (host:port, port 0 picks one). The
// listener's Addr is advertiseAddr if set, else the bound address.
func NewTCPStreamLayer(bindAddr, advertiseAddr string) (StreamLayer, error) {
	ln, err := net.Listen("tcp", bindAddr)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen on %q: %w", bindAddr, err)
	}
	addr := ln.Addr()
	if advertiseAddr != "" {
		addr = Addr(advertiseAddr)
	}
	return &tcpStreamLayer{Listener: ln, addr: addr}, nil
}

type tcpStreamLayer struct {
	net.Listener
	addr net.Addr
}

func (l *tcpStreamLayer) Addr() net.Addr { return l.addr }

func (l *tcpStreamLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// NewTLSStreamLayer wraps inner in TLS: accepted connections are served with
// server, dialed ones use client (its ServerName is left to the caller; set
// it or use VerifyPeerCertificate for node certificates).
func NewTLSStreamLayer(inner StreamLayer, server, client *tls.Config) StreamLayer {
	return &tlsStreamLayer{StreamLayer: inner, server: server, client: client}
}

type tlsStreamLayer struct {
	StreamLayer
	server, client *tls.Config
}

func (l *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := l.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return tls.Server(c, l.server), nil
}

func (l *tlsStreamLayer) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := l.StreamLayer.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.client)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return tc, nil
}

// Addr is a net.Addr given by its host:port string (an advertised address,
// an in-memory network's address).
type Addr string

// Network is "tcp".
func (a Addr) Network() string { return "tcp" }

func (a Addr) String() string { return string(a) }
