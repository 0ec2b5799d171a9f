package apitypes

import "testing"

func TestParseRouteToken(t *testing.T) {
	for _, c := range []struct {
		in    string
		shard uint32
		epoch uint64
		ok    bool
	}{
		{"17/4", 17, 4, true},
		{"0/1", 0, 1, true},
		{"4294967295/18446744073709551615", 4294967295, 18446744073709551615, true},
		{"", 0, 0, false},
		{"17", 0, 0, false},
		{"17/0", 0, 0, false},
		{"-1/2", 0, 0, false},
		{"4294967296/2", 0, 0, false},
		{"1/2/3", 0, 0, false},
		{" 1/2", 0, 0, false},
		{"1/18446744073709551616", 0, 0, false},
		{"1/" + string(make([]byte, 100)), 0, 0, false},
	} {
		s, e, err := ParseRouteToken(c.in)
		if (err == nil) != c.ok || s != c.shard || e != c.epoch {
			t.Errorf("ParseRouteToken(%q) = %d, %d, %v; want %d, %d, ok=%v", c.in, s, e, err, c.shard, c.epoch, c.ok)
		}
		if c.ok && FormatRouteToken(s, e) != c.in {
			t.Errorf("FormatRouteToken(%d, %d) = %q", s, e, FormatRouteToken(s, e))
		}
	}
}

func FuzzParseRouteToken(f *testing.F) {
	f.Add("17/4")
	f.Add("x/")
	f.Fuzz(func(t *testing.T, v string) {
		s, e, err := ParseRouteToken(v)
		if err == nil && FormatRouteToken(s, e) != v {
			// Leading zeros and "+" parse; the canonical form must parse back the same.
			s2, e2, err2 := ParseRouteToken(FormatRouteToken(s, e))
			if err2 != nil || s2 != s || e2 != e {
				t.Fatalf("%q -> %d/%d does not round-trip", v, s, e)
			}
		}
	})
}
