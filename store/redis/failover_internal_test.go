package redis

import "testing"

// TestSetAckedKeepsHighest: two appends of one session acknowledged out
// of order (14, then 12) leave the mark at 14; a later generation's mark
// replaces it, and an older generation's does not.
func TestSetAckedKeepsHighest(t *testing.T) {
	s := &Store{}
	for _, step := range []struct {
		gen, hwm       uint64
		wantGen, acked uint64
	}{
		{1, 14, 1, 14},
		{1, 12, 1, 14},
		{1, 15, 1, 15},
		{2, 3, 2, 3},
		{1, 20, 2, 3},
	} {
		s.setAcked("tok", step.gen, step.hwm)
		if got := s.acked("tok", step.wantGen); got != step.acked {
			t.Fatalf("after setAcked(gen %d, %d): acked(gen %d) = %d, want %d", step.gen, step.hwm, step.wantGen, got, step.acked)
		}
	}
	if got := s.acked("tok", 1); got != 0 {
		t.Fatalf("acked(gen 1) after generation 2's mark = %d, want 0", got)
	}
}
