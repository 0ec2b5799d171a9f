//go:build race

package simulation

func init() { raceEnabled = true }
