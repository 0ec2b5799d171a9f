package mutation

import "testing"

// With the tag, Set turns exactly one switch on and restore turns it off;
// without it, every switch reads off and Set refuses.
func TestSetAndOn(t *testing.T) {
	if !Enabled {
		for _, s := range All() {
			if On(s) {
				t.Fatalf("On(%s) without -tags mutations", s)
			}
		}
		defer func() {
			if recover() == nil {
				t.Fatal("Set without -tags mutations did not panic")
			}
		}()
		Set(SkipExpiryWait)
		return
	}
	restore := Set(SkipExpiryWait)
	for _, s := range All() {
		if On(s) != (s == SkipExpiryWait) {
			t.Errorf("On(%s) = %v with SkipExpiryWait set", s, On(s))
		}
	}
	restore()
	for _, s := range All() {
		if On(s) {
			t.Errorf("On(%s) after restore", s)
		}
	}
}
