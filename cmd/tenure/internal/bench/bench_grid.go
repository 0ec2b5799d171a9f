package bench

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/tenurehq/tenure/cmd/tenure/internal/cli"
)

// caseGrid is what bench ring and bench placement share: the -partitions ×
// -members cases, -trials per case and -json. Register it on the FlagSet
// with newCaseGrid before setting fs.Usage, then call parse.
type caseGrid struct {
	cmd         string // the FlagSet's name ("bench ring"): prefixes errors
	asJSON      *bool
	parts, mems *string
	trials      *int

	partitions, members []int // after parse
}

func newCaseGrid(fs *flag.FlagSet, partitions, members []int, trialsUsage string) *caseGrid {
	return &caseGrid{
		cmd:    fs.Name(),
		asJSON: fs.Bool("json", false, "print one JSON object per case"),
		parts:  fs.String("partitions", joinInts(partitions), "comma-separated partition counts"),
		mems:   fs.String("members", joinInts(members), "comma-separated member counts"),
		trials: fs.Int("trials", 5, trialsUsage),
	}
}

// parse parses args into fs and checks the grid: no positional arguments,
// positive counts, at least one trial.
func (g *caseGrid) parse(fs *flag.FlagSet, args []string) error {
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", g.cmd, strings.Join(fs.Args(), " "))
	}
	var err error
	if g.partitions, err = g.parseInts("partitions", *g.parts); err != nil {
		return err
	}
	if g.members, err = g.parseInts("members", *g.mems); err != nil {
		return err
	}
	if *g.trials < 1 {
		return fmt.Errorf("%s: -trials = %d, want ≥ 1", g.cmd, *g.trials)
	}
	return nil
}

func (g *caseGrid) parseInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: -%s: %q is not a positive integer", g.cmd, name, f)
		}
		out = append(out, v)
	}
	return out, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// caseOutput prints measured cases: with -json each as one JSON line as
// soon as it is added, otherwise all of them as one table by flush.
type caseOutput[T any] struct {
	w      io.Writer
	asJSON bool
	table  func(io.Writer, []T) error
	cases  []T
}

func (o *caseOutput[T]) add(c T) error {
	o.cases = append(o.cases, c)
	if o.asJSON {
		return writeJSONLine(o.w, c)
	}
	return nil
}

func (o *caseOutput[T]) flush() error {
	if o.asJSON {
		return nil
	}
	return o.table(o.w, o.cases)
}
