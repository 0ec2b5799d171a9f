package rpc

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/identity"
)

// bufConn is a net.Conn that reads from a buffer (writes are discarded).
type bufConn struct {
	r io.Reader
	net.Conn
}

func (c *bufConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *bufConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bufConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *bufConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }

// FuzzGobLimitConn: the RPC frame limiter passes bytes through unchanged,
// never lets a message longer than its limit through, and never panics.
func FuzzGobLimitConn(f *testing.F) {
	f.Add([]byte{0x03, 'a', 'b', 'c', 0x01, 'x'}, uint16(16))
	f.Add([]byte{0xfe, 0x01, 0x00}, uint16(100))              // 256-byte message over a 100-byte limit
	f.Add([]byte{0xf7, 1, 2, 3, 4, 5, 6, 7, 8, 9}, uint16(8)) // a 9-byte length prefix: invalid
	f.Add([]byte{0x80}, uint16(1))
	f.Add(bytes.Repeat([]byte{0x7f}, 300), uint16(200))
	f.Fuzz(func(t *testing.T, in []byte, limit uint16) {
		max := int(limit)
		c := newGobLimitConn(&bufConn{r: bytes.NewReader(in)}, max, time.Second, time.Second)
		var out []byte
		buf := make([]byte, 7)
		var err error
		for {
			var n int
			n, err = c.Read(buf)
			out = append(out, buf[:n]...)
			if err != nil {
				break
			}
			if n == 0 && len(out) >= len(in) {
				t.Fatal("Read returned 0 bytes and no error at the end of input")
			}
		}
		if !bytes.HasPrefix(in, out) {
			t.Fatalf("the limiter changed the bytes: in %x, out %x", in, out)
		}
		// Walk the frames of what came out: each is at most max long.
		for rest := out; len(rest) > 0; {
			b := rest[0]
			hdr, length := 1, uint64(b)
			if b >= 0x80 {
				k := int(-int8(b))
				if k < 1 || k > 8 || len(rest) < 1+k {
					break // a partial header at the end
				}
				length = 0
				for _, x := range rest[1 : 1+k] {
					length = length<<8 | uint64(x)
				}
				hdr += k
			}
			if length > uint64(max) {
				t.Fatalf("a %d-byte message passed a %d-byte limit", length, max)
			}
			if uint64(len(rest)-hdr) < length {
				break
			}
			rest = rest[hdr+int(length):]
		}
		if err != io.EOF && !errors.Is(err, identity.ErrMessageTooLarge) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("error %v: want EOF or identity.ErrMessageTooLarge", err)
		}
	})
}
