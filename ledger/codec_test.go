package ledger

import "testing"

// The codec walks a command passed by value with pointers that must not
// escape: if they did (say, a field passed to fmt in codec.walk), every
// Encode and Decode would allocate a copy of the command. Decode of a
// Grant allocates the reader, its two strings and the boxed Command;
// Encode the writer, its buffer and the boxed argument.
func TestCodecDoesNotAllocate(t *testing.T) {
	c := Grant{Shard: 1, ExpectedEpoch: 2, Owner: "a", Reason: "r"}
	b := MustEncode(c)
	var sink Command
	if n := testing.AllocsPerRun(200, func() { sink, _ = Decode(b) }); n > 4 {
		t.Errorf("Decode(Grant) allocates %v times, want ≤ 4", n)
	}
	var cmd Command = c
	if n := testing.AllocsPerRun(200, func() { b, _ = Encode(cmd) }); n > 2 {
		t.Errorf("Encode(Grant) allocates %v times, want ≤ 2", n)
	}
	_ = sink
}
