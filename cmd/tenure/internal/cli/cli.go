// Package cli holds the command-line helpers that cmd/tenure and its
// benchmarks (cmd/tenure/internal/bench) share.
package cli

import "flag"

// IsHelp reports whether arg asks for help.
func IsHelp(arg string) bool {
	return arg == "-h" || arg == "--help" || arg == "-help" || arg == "help"
}

// ParseFlags parses args into fs, accepting flags after positional
// arguments too (`jobs get 7 --addr X`); "--" ends the flags. The
// positional arguments are fs.Args() afterwards.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	return fs.Parse(append([]string{"--"}, pos...))
}
