package gossip

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKeyringFile: the keyring file round-trips, is private to its owner,
// and every kind of damage is ErrBadKeyring naming the file.
func TestKeyringFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gossip.keyring")
	if keys, err := LoadKeyring(path); err != nil || keys != nil {
		t.Fatalf("missing file: %v, %v; want nil, nil", keys, err)
	}
	want := [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)}
	if err := SaveKeyring(path, want); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("keyring file mode %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	got, err := LoadKeyring(path)
	if err != nil || len(got) != 2 || !bytes.Equal(got[0], want[0]) || !bytes.Equal(got[1], want[1]) {
		t.Fatalf("LoadKeyring = %x, %v; want %x", got, err, want)
	}
	for name, content := range map[string]string{
		"empty":          "",
		"not json":       "\x00\x01garbage",
		"truncated":      `{"keys": ["AQEBAQEBAQEBAQEBAQEBAQ==`,
		"no keys":        `{"keys": []}`,
		"bad base64":     `{"keys": ["!!!"]}`,
		"bad length":     `{"keys": ["AQID"]}`,
		"unknown field":  `{"keys": ["AQEBAQEBAQEBAQEBAQEBAQ=="], "x": 1}`,
		"over the limit": `{"keys": ["` + strings.Repeat("A", maxKeyringFile) + `"]}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadKeyring(path); !errors.Is(err, ErrBadKeyring) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: LoadKeyring = %v, want ErrBadKeyring naming %s", name, err, path)
		}
	}
}

// FuzzLoadKeyring: any keyring file either loads 1..maxKeyringKeys valid
// keys (which save and load back the same) or fails with ErrBadKeyring;
// nothing panics.
func FuzzLoadKeyring(f *testing.F) {
	f.Add([]byte(`{"keys":["AAAAAAAAAAAAAAAAAAAAAA=="]}`))
	f.Add([]byte(`{"keys":[]}`))
	f.Add([]byte(`{"keys":["AAAAAAAAAAAAAAAAAAAAAA==","AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="],"x":1}`))
	f.Add([]byte(`{"keys":["not base64"]}`))
	f.Add([]byte("\x00\xff{"))
	f.Fuzz(func(t *testing.T, in []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "gossip.keyring")
		if err := os.WriteFile(path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := LoadKeyring(path)
		if err != nil {
			if !errors.Is(err, ErrBadKeyring) {
				t.Fatalf("error %v does not wrap ErrBadKeyring", err)
			}
			return
		}
		if len(keys) == 0 || len(keys) > maxKeyringKeys {
			t.Fatalf("loaded %d keys", len(keys))
		}
		for _, k := range keys {
			if n := len(k); n != 16 && n != 24 && n != 32 {
				t.Fatalf("loaded a %d-byte key", n)
			}
		}
		if err := SaveKeyring(path, keys); err != nil {
			t.Fatal(err)
		}
		again, err := LoadKeyring(path)
		if err != nil || len(again) != len(keys) {
			t.Fatalf("saved keyring reloads as %d keys, %v", len(again), err)
		}
		for i := range keys {
			if !bytes.Equal(keys[i], again[i]) {
				t.Fatalf("key %d changed in a save and load", i)
			}
		}
	})
}
