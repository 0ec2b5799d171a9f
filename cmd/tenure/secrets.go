package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/tenurehq/tenure/httpapi/apitypes"
)

// readSecretFile reads a token from a file: the whole file with
// surrounding white space trimmed, which must be non-empty.
func readSecretFile(flagName, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	if len(b) > 4096 {
		return "", fmt.Errorf("%s %s: %d bytes, want a token of at most 4096", flagName, path, len(b))
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s %s: the file is empty", flagName, path)
	}
	return s, nil
}

// checkToken refuses tokens that cannot travel in a header intact.
func checkToken(s string) error { return apitypes.CheckToken(s) }
