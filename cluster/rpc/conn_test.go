package rpc

import (
	"bytes"
	"encoding/gob"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tenurehq/tenure/cluster/identity"
)

// bytesConn is a net.Conn reading from a buffer.
type bytesConn struct {
	net.Conn
	r io.Reader
}

func (c bytesConn) Read(p []byte) (int, error)      { return c.r.Read(p) }
func (c bytesConn) SetReadDeadline(time.Time) error { return nil }
func (c bytesConn) RemoteAddr() net.Addr            { return Addr("peer:1") }

// The gob limiter passes messages under the limit through unchanged (a gob
// decoder on top reads them) and refuses a larger one before gob allocates.
func TestGobLimitConn(t *testing.T) {
	var buf bytes.Buffer
	enc := gob.NewEncoder(&buf)
	small := bytes.Repeat([]byte("s"), 1000)
	for i := 0; i < 3; i++ {
		if err := enc.Encode(small); err != nil {
			t.Fatal(err)
		}
	}
	if err := enc.Encode(bytes.Repeat([]byte("L"), 200_000)); err != nil {
		t.Fatal(err)
	}
	dec := gob.NewDecoder(newGobLimitConn(bytesConn{r: &buf}, 100_000, 0, 0))
	for i := 0; i < 3; i++ {
		var got []byte
		if err := dec.Decode(&got); err != nil || !bytes.Equal(got, small) {
			t.Fatalf("message %d: %v (%d bytes)", i, err, len(got))
		}
	}
	var got []byte
	if err := dec.Decode(&got); !errors.Is(err, identity.ErrMessageTooLarge) {
		t.Fatalf("200 kB message under a 100 kB limit: err = %v, want identity.ErrMessageTooLarge", err)
	}
}

// A length prefix that claims more than 8 length bytes is refused.
func TestGobLimitConnBadPrefix(t *testing.T) {
	c := newGobLimitConn(bytesConn{r: bytes.NewReader([]byte{0x80, 1, 2})}, 1<<20, 0, 0)
	if _, err := c.Read(make([]byte, 16)); !errors.Is(err, identity.ErrMessageTooLarge) {
		t.Fatalf("err = %v, want identity.ErrMessageTooLarge", err)
	}
}
