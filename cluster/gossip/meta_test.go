package gossip

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func fullMeta() Meta {
	return Meta{
		ID:          "node-7",
		Group:       "prod",
		Incarnation: 1 << 40,
		Health:      0.75,
		Draining:    true,
		Leaving:     true,
		RaftAddr:    "10.0.0.7:7000",
		HTTPAddr:    "10.0.0.7:8080",
		Version:     "v1.2.3",
		Tags:        map[string]string{"zone": "eu-1b", "rack": "r12", "": "empty key"},
	}
}

func TestMetaRoundTrip(t *testing.T) {
	for _, m := range []Meta{
		{ID: "a"},
		{ID: "b", Health: 1},
		fullMeta(),
	} {
		b, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("encode %+v: %v", m, err)
		}
		if b[0] != MetaVersion {
			t.Fatalf("version byte %d", b[0])
		}
		got, err := DecodeMeta(b)
		if err != nil {
			t.Fatalf("decode %x: %v", b, err)
		}
		if len(m.Tags) == 0 {
			m.Tags = nil
		}
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, m)
		}
		again, _ := EncodeMeta(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("encoding not canonical: %x vs %x", again, b)
		}
	}
}

func TestMetaEncodeDeterministic(t *testing.T) {
	want, _ := EncodeMeta(fullMeta())
	for range 20 { // map iteration order varies; the bytes must not
		got, _ := EncodeMeta(fullMeta())
		if !bytes.Equal(got, want) {
			t.Fatalf("encoding differs between runs")
		}
	}
}

func TestMetaEncodeErrors(t *testing.T) {
	tests := []struct {
		name string
		meta Meta
		want error
	}{
		{"empty id", Meta{}, ErrInvalidMeta},
		{"health NaN", Meta{ID: "a", Health: math.NaN()}, ErrInvalidMeta},
		{"health negative", Meta{ID: "a", Health: -0.1}, ErrInvalidMeta},
		{"health above one", Meta{ID: "a", Health: 1.5}, ErrInvalidMeta},
		{"negative zero", Meta{ID: "a", Health: math.Copysign(0, -1)}, ErrInvalidMeta},
		{"bad utf8", Meta{ID: "a\xff"}, ErrInvalidMeta},
		{"bad utf8 tag", Meta{ID: "a", Tags: map[string]string{"k": "\xff"}}, ErrInvalidMeta},
		{"too large", Meta{ID: "a", Tags: map[string]string{"k": strings.Repeat("x", 500)}}, ErrMetaTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := EncodeMeta(tt.meta); !errors.Is(err, tt.want) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
		})
	}
}

func TestMetaMaxSizeBoundary(t *testing.T) {
	base, _ := EncodeMeta(Meta{ID: "a", Tags: map[string]string{"k": ""}})
	// One tag value byte adds one byte while the length stays one varint
	// byte (< 128), so grow the value in steps across the limit.
	fill := func(n int) Meta {
		return Meta{ID: "a", Tags: map[string]string{"k": "", "l": strings.Repeat("x", n)}}
	}
	n := 0
	for {
		b, err := EncodeMeta(fill(n))
		if err != nil {
			if !errors.Is(err, ErrMetaTooLarge) {
				t.Fatal(err)
			}
			break
		}
		if len(b) > MetaMaxSize {
			t.Fatalf("encoded %d bytes without error", len(b))
		}
		n++
	}
	exact, _ := EncodeMeta(fill(n - 1))
	if len(exact) != MetaMaxSize {
		t.Fatalf("largest accepted encoding is %d bytes, want %d (base %d)", len(exact), MetaMaxSize, len(base))
	}
}

func TestDecodeMetaMalformed(t *testing.T) {
	good, _ := EncodeMeta(fullMeta())
	tests := map[string][]byte{
		"nil":              nil,
		"version zero":     append([]byte{0}, good[1:]...),
		"truncated":        good[:len(good)-1],
		"trailing":         append(append([]byte(nil), good...), 0),
		"too large":        make([]byte, MetaMaxSize+1),
		"huge string":      {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"non-minimal":      {1, 0x81, 0x00, 'a'},
		"varint overflow":  {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"unsorted tags":    mustEncodeRaw(t, 1, [][2]string{{"b", "1"}, {"a", "2"}}, 0),
		"duplicate tags":   mustEncodeRaw(t, 1, [][2]string{{"a", "1"}, {"a", "2"}}, 0),
		"unknown v1 flags": mustEncodeRaw(t, 1, nil, 0x80),
		"huge tag count":   hugeTagCount(t),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeMeta(b); err == nil {
				t.Fatalf("decoded %x without error", b)
			} else if !errors.Is(err, ErrInvalidMeta) && !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("error %v matches neither sentinel", err)
			}
		})
	}
}

func hugeTagCount(t *testing.T) []byte {
	b := mustEncodeRaw(t, 1, nil, 0)
	b[len(b)-1] = 0x7f // 127 tags announced, none present
	return b
}

// A newer version that appends fields and flags must still decode.
func TestDecodeMetaForwardCompatible(t *testing.T) {
	b := mustEncodeRaw(t, 2, [][2]string{{"a", "1"}}, 0x80|metaFlagDraining)
	b = append(b, "future fields"...)
	m, err := DecodeMeta(b)
	if err != nil {
		t.Fatalf("version 2: %v", err)
	}
	if m.ID != "x" || !m.Draining || m.Tags["a"] != "1" {
		t.Fatalf("decoded %+v", m)
	}
}

// mustEncodeRaw builds an encoding by hand (version, tags in the given
// order, flags) for malformed and future inputs.
func mustEncodeRaw(t *testing.T, version byte, tags [][2]string, flags byte) []byte {
	t.Helper()
	b := []byte{version}
	b = appendString(b, "x")
	b = appendString(b, "g")
	b = append(b, 3)                  // incarnation
	b = append(b, make([]byte, 8)...) // health 0
	b = append(b, flags)
	b = appendString(b, "")
	b = appendString(b, "")
	b = appendString(b, "")
	b = append(b, byte(len(tags)))
	for _, kv := range tags {
		b = appendString(b, kv[0])
		b = appendString(b, kv[1])
	}
	return b
}

func FuzzDecodeMeta(f *testing.F) {
	good, _ := EncodeMeta(fullMeta())
	f.Add(good)
	f.Add([]byte{})
	f.Add([]byte{1})
	f.Add([]byte{2, 1, 'a'})
	min, _ := EncodeMeta(Meta{ID: "a"})
	f.Add(min)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeMeta(b)
		if err != nil {
			if !errors.Is(err, ErrInvalidMeta) && !errors.Is(err, ErrMetaTooLarge) {
				t.Fatalf("error %v matches neither sentinel", err)
			}
			return
		}
		enc, err := EncodeMeta(m)
		if err != nil {
			t.Fatalf("decoded %+v does not re-encode: %v", m, err)
		}
		if b[0] == MetaVersion && !bytes.Equal(enc, b) {
			t.Fatalf("version %d input not canonical:\n in %x\nout %x", MetaVersion, b, enc)
		}
		back, err := DecodeMeta(enc)
		if err != nil || !reflect.DeepEqual(back, m) {
			t.Fatalf("re-decode: %+v, %v; want %+v", back, err, m)
		}
	})
}
