package gossip

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"unicode/utf8"

	"github.com/hashicorp/memberlist"
)

// MetaMaxSize is the largest encoded Meta that gossip can carry
// (memberlist.MetaMaxSize). EncodeMeta refuses anything larger instead of
// letting memberlist panic.
const MetaMaxSize = memberlist.MetaMaxSize

// MetaVersion is the encoding version EncodeMeta writes.
//
// Compatibility rule: a version only ever appends fields. A decoder accepts
// every version ≥ 1; for a version newer than its own it reads the fields it
// knows and ignores the rest, so a rolling upgrade never makes old nodes drop
// new ones. For its own version it demands the canonical encoding (no trailing
// bytes, minimal varints, sorted tags), which makes EncodeMeta(DecodeMeta(b))
// == b.
const MetaVersion = 1

const (
	metaFlagDraining = 1 << 0
	metaFlagLeaving  = 1 << 1
)

// EncodeMeta encodes m in the versioned gossip format. It fails with an error
// matching ErrInvalidMeta for an empty ID, a health outside [0,1] or invalid
// UTF-8, and with ErrMetaTooLarge when the result exceeds MetaMaxSize.
//
// Layout of version 1 (strings are uvarint length + UTF-8 bytes):
//
//	version(1) ID Group Incarnation(uvarint) Health(float64 bits, 8 bytes BE)
//	flags(1: draining, leaving) RaftAddr HTTPAddr Version
//	tagCount(uvarint) {key value} sorted by key
func EncodeMeta(m Meta) ([]byte, error) {
	if err := validateMeta(m); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m.Tags))
	for k := range m.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	b := make([]byte, 0, 64)
	b = append(b, MetaVersion)
	b = appendString(b, m.ID)
	b = appendString(b, m.Group)
	b = binary.AppendUvarint(b, m.Incarnation)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(m.Health))
	var flags byte
	if m.Draining {
		flags |= metaFlagDraining
	}
	if m.Leaving {
		flags |= metaFlagLeaving
	}
	b = append(b, flags)
	b = appendString(b, m.RaftAddr)
	b = appendString(b, m.HTTPAddr)
	b = appendString(b, m.Version)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendString(b, k)
		b = appendString(b, m.Tags[k])
	}
	if len(b) > MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrMetaTooLarge, len(b), MetaMaxSize)
	}
	return b, nil
}

// DecodeMeta decodes metadata gossiped by a peer. It never panics and never
// allocates more than the input's size; every failure matches ErrInvalidMeta
// (or ErrMetaTooLarge for an input over MetaMaxSize).
func DecodeMeta(b []byte) (Meta, error) {
	var m Meta
	if len(b) > MetaMaxSize {
		return m, fmt.Errorf("%w: %d bytes, limit %d", ErrMetaTooLarge, len(b), MetaMaxSize)
	}
	if len(b) == 0 {
		return m, fmt.Errorf("%w: empty", ErrInvalidMeta)
	}
	d := metaDecoder{b: b[1:]}
	version := b[0]
	if version == 0 {
		return m, fmt.Errorf("%w: version 0", ErrInvalidMeta)
	}
	m.ID = d.string("id")
	m.Group = d.string("group")
	m.Incarnation = d.uvarint("incarnation")
	m.Health = math.Float64frombits(d.uint64("health"))
	flags := d.byte("flags")
	m.Draining = flags&metaFlagDraining != 0
	m.Leaving = flags&metaFlagLeaving != 0
	m.RaftAddr = d.string("raft address")
	m.HTTPAddr = d.string("http address")
	m.Version = d.string("version")
	n := d.uvarint("tag count")
	if d.err == nil && n > uint64(len(d.b)/2) { // every tag takes ≥ 2 bytes
		d.fail("tag count %d exceeds the remaining %d bytes", n, len(d.b))
	}
	prev := ""
	for i := uint64(0); i < n && d.err == nil; i++ {
		k := d.string("tag key")
		v := d.string("tag value")
		if d.err != nil {
			break
		}
		if i > 0 && k <= prev {
			d.fail("tag keys not strictly ascending at %q", k)
			break
		}
		if m.Tags == nil {
			m.Tags = make(map[string]string, n)
		}
		m.Tags[k] = v
		prev = k
	}
	if d.err == nil && version == MetaVersion {
		if flags&^(metaFlagDraining|metaFlagLeaving) != 0 {
			d.fail("unknown flags %#x", flags)
		} else if len(d.b) != 0 {
			d.fail("%d trailing bytes", len(d.b))
		}
	}
	if d.err != nil {
		return Meta{}, d.err
	}
	if err := validateMeta(m); err != nil {
		return Meta{}, err
	}
	return m, nil
}

func validateMeta(m Meta) error {
	switch {
	case m.ID == "":
		return fmt.Errorf("%w: empty node id", ErrInvalidMeta)
	case math.IsNaN(m.Health) || m.Health < 0 || m.Health > 1 || math.Signbit(m.Health):
		return fmt.Errorf("%w: health %v outside [0,1]", ErrInvalidMeta, m.Health)
	}
	for _, s := range []string{m.ID, m.Group, m.RaftAddr, m.HTTPAddr, m.Version} {
		if !utf8.ValidString(s) {
			return fmt.Errorf("%w: invalid UTF-8 in %q", ErrInvalidMeta, s)
		}
	}
	for k, v := range m.Tags {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return fmt.Errorf("%w: invalid UTF-8 in tag %q", ErrInvalidMeta, k)
		}
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// metaDecoder reads fields until the first error, after which every read
// returns the zero value.
type metaDecoder struct {
	b   []byte
	err error
}

func (d *metaDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrInvalidMeta, fmt.Sprintf(format, args...))
	}
}

func (d *metaDecoder) uvarint(field string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overflowing %s", field)
		return 0
	}
	if n != len(binary.AppendUvarint(nil, v)) {
		d.fail("non-minimal varint in %s", field)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *metaDecoder) uint64(field string) uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.fail("truncated %s", field)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *metaDecoder) byte(field string) byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.fail("truncated %s", field)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *metaDecoder) string(field string) string {
	n := d.uvarint(field + " length")
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.fail("%s length %d exceeds the remaining %d bytes", field, n, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
