package member

import "testing"

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Alive: "alive", Suspect: "suspect", Dead: "dead", Left: "left", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}
