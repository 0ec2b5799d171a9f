package simulation

// Shrink cuts a failing run's fault schedule to a minimal one that still
// fails with a violation of the same rule: it drops one fault at a time
// (greedy, to a fixpoint) and keeps every drop after which the run still
// fails. cfg.Faults (or the schedule drawn from the seed) is the start; it
// returns the shrunk configuration and its result, or cfg and nil if cfg
// does not fail. maxRuns bounds the number of simulations.
func Shrink(cfg Config, maxRuns int) (Config, *Result) {
	if cfg.Faults == nil && cfg.RandomFaults {
		cfg.Faults = GenerateFaults(cfg)
	}
	cfg.StopAtFirstViolation = true
	cfg.Trace = nil
	best, err := Run(cfg)
	if err != nil || !best.Failed() {
		return cfg, nil
	}
	rule := best.Violations[0].Rule
	runs := 1
	for changed := true; changed && runs < maxRuns; {
		changed = false
		for i := 0; i < len(cfg.Faults) && runs < maxRuns; i++ {
			try := cfg
			try.Faults = append(append([]Fault{}, cfg.Faults[:i]...), cfg.Faults[i+1:]...)
			res, err := Run(try)
			runs++
			if err == nil && res.Failed() && res.Violations[0].Rule == rule {
				cfg, best, changed = try, res, true
				i--
			}
		}
	}
	return cfg, best
}
