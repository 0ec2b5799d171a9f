package httpapi_test

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/httpapi"
)

// FuzzParseIdempotencyKey: any header value is refused with an error or
// accepted as 1–255 printable ASCII bytes without quotes; it never panics,
// and a key maps to the same request id every time.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", `""`, `"abc"`, "abc", `"a\"b"`, "caf\xc3\xa9", strings.Repeat("k", 256), `"unterminated`, "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := httpapi.ParseIdempotencyKey(v)
		if err != nil {
			return
		}
		if len(k) == 0 || len(k) > httpapi.MaxIdempotencyKeyLen {
			t.Fatalf("accepted %q as a key of %d bytes", v, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e || k[i] == '"' {
				t.Fatalf("accepted %q with byte %#x", v, k[i])
			}
		}
		again := string([]byte(k)) // another string with the same bytes
		if httpapi.RequestIDFromKey(k) != httpapi.RequestIDFromKey(again) {
			t.Fatal("the id of a key changed")
		}
	})
}
