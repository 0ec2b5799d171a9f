package identity

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadIdentity(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	id, err := LoadIdentity(dir, "web-1")
	if err != nil {
		t.Fatal(err)
	}
	if id != (Identity{ID: "web-1", Incarnation: 1}) {
		t.Fatalf("first load = %+v", id)
	}
	// The persisted id wins over a new default; the incarnation grows.
	for want := uint64(2); want <= 4; want++ {
		id, err = LoadIdentity(dir, "other")
		if err != nil {
			t.Fatal(err)
		}
		if id.ID != "web-1" || id.Incarnation != want {
			t.Fatalf("load = %+v, want web-1/%d", id, want)
		}
	}
	// No leftover temp files.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("data dir holds %d entries, want 2", len(ents))
	}
}

func TestLoadIdentityGeneratesID(t *testing.T) {
	dir := t.TempDir()
	a, err := LoadIdentity(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadIdentity(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.ID, "node-") || a.ID != b.ID || b.Incarnation != a.Incarnation+1 {
		t.Fatalf("a=%+v b=%+v", a, b)
	}
}

func TestLoadIdentityRejectsBadInput(t *testing.T) {
	cases := map[string]func(dir string){
		"bad default id": func(string) {},
		"corrupt incarnation": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, identityIDFile), []byte("ok\n"), 0o644)
			_ = os.WriteFile(filepath.Join(dir, identityIncarnationFile), []byte("12x"), 0o644)
		},
		"corrupt id": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, identityIDFile), []byte("has space"), 0o644)
		},
		"exhausted counter": func(dir string) {
			_ = os.WriteFile(filepath.Join(dir, identityIDFile), []byte("ok\n"), 0o644)
			_ = os.WriteFile(filepath.Join(dir, identityIncarnationFile), []byte("18446744073709551615"), 0o644)
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			setup(dir)
			_, err := LoadIdentity(dir, "bad\tid")
			if !errors.Is(err, ErrBadIdentity) {
				t.Fatalf("err = %v, want ErrBadIdentity", err)
			}
		})
	}
	if _, err := LoadIdentity("", "x"); !errors.Is(err, ErrBadIdentity) {
		t.Fatalf("empty dir: %v", err)
	}
}

// TestLoadIdentityDamaged: each damaged identity file is refused with
// ErrBadIdentity and a message naming the file and the way out.
func TestLoadIdentityDamaged(t *testing.T) {
	cases := []struct {
		name     string
		id, inc  *string // file contents; nil: no file
		wantFile string
		want     string
	}{
		{"empty node id", ptr(""), ptr("3\n"), identityIDFile, "is damaged"},
		{"binary node id", ptr("\x00\xff\x10garbage"), ptr("3\n"), identityIDFile, "is damaged"},
		{"node id too long", ptr(strings.Repeat("x", 200)), ptr("3\n"), identityIDFile, "is damaged"},
		{"empty incarnation", ptr("n1\n"), ptr(""), identityIncarnationFile, "is damaged"},
		{"binary incarnation", ptr("n1\n"), ptr("\x00\x00\x00\x00"), identityIncarnationFile, "is damaged"},
		{"negative incarnation", ptr("n1\n"), ptr("-4\n"), identityIncarnationFile, "is damaged"},
		{"node id without incarnation", ptr("n1\n"), nil, identityIncarnationFile, "counter was lost"},
		{"incarnation without node id", nil, ptr("7\n"), identityIDFile, "node id was lost"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.id != nil {
				if err := os.WriteFile(filepath.Join(dir, identityIDFile), []byte(*c.id), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.inc != nil {
				if err := os.WriteFile(filepath.Join(dir, identityIncarnationFile), []byte(*c.inc), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := LoadIdentity(dir, "n1")
			if !errors.Is(err, ErrBadIdentity) {
				t.Fatalf("err = %v, want ErrBadIdentity", err)
			}
			for _, w := range []string{c.want, filepath.Join(dir, c.wantFile), "remove the data dir and rejoin as a new member"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
			if has, err := HasIdentity(dir); err != nil || !has {
				t.Errorf("HasIdentity = %v, %v; want true", has, err)
			}
		})
	}
	if has, err := HasIdentity(t.TempDir()); err != nil || has {
		t.Errorf("HasIdentity(empty dir) = %v, %v; want false", has, err)
	}
}

func ptr(s string) *string { return &s }
