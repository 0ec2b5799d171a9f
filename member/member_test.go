package member

import "testing"

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Alive: "alive", Suspect: "suspect", Dead: "dead", Left: "left", 9: "State(9)"} {
		if got := s.String(); got != want {
			t.Errorf("State(%d).String() = %q, want %q", uint8(s), got, want)
		}
	}
}

func TestStateUp(t *testing.T) {
	for s, want := range map[State]bool{Alive: true, Suspect: true, Dead: false, Left: false, 9: false} {
		if got := s.Up(); got != want {
			t.Errorf("%v.Up() = %v, want %v", s, got, want)
		}
	}
}
