package main

import "testing"

func TestParseShardRange(t *testing.T) {
	for _, tc := range []struct {
		in          string
		first, last uint32
		ok          bool
	}{
		{"3", 3, 3, true}, {"0-7", 0, 7, true}, {"7-3", 0, 0, false}, {"x", 0, 0, false}, {"1-", 0, 0, false}, {"-1", 0, 0, false},
		{"4294967296", 0, 0, false},
	} {
		f, l, err := parseShardRange(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (f != tc.first || l != tc.last)) {
			t.Errorf("parseShardRange(%q) = %d, %d, %v", tc.in, f, l, err)
		}
	}
}
