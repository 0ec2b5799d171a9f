package main

import (
	"context"

	"github.com/tenurehq/tenure/cmd/tenure/internal/bench"
)

// `tenure bench <name>` runs a benchmark of cmd/tenure/internal/bench.
func init() {
	register("bench", "run a benchmark (tenure bench <name> -h)", func(ctx context.Context, m *Main, args []string) error {
		return bench.Run(ctx, &bench.Env{Stdout: m.Stdout, Stderr: m.Stderr}, args)
	})
}
