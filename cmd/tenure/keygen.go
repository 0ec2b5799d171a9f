package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
)

func init() {
	register("keygen", "print a new random gossip encryption key (base64) for --encrypt", runKeygen)
}

// runKeygen prints a fresh gossip key: 32 random bytes (AES-256), base64.
func runKeygen(_ context.Context, m *Main, args []string) error {
	fs := flag.NewFlagSet("keygen", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	size := fs.Int("bytes", 32, "key size: 16, 24 or 32 bytes (AES-128, -192, -256)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("keygen takes no arguments, got %q", fs.Args())
	}
	if *size != 16 && *size != 24 && *size != 32 {
		return fmt.Errorf("keygen: --bytes %d: want 16, 24 or 32", *size)
	}
	key := make([]byte, *size)
	if _, err := io.ReadFull(rand.Reader, key); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	fmt.Fprintln(m.Stdout, base64.StdEncoding.EncodeToString(key))
	return nil
}
