package taskrun

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSettledTableForgets: the settled table lists a task until its
// record's expiry (exclusive), forgets the expired ones from the earliest
// added as it takes new ones, and keeps MaxSettled at most, the earliest
// added forgotten first.
func TestSettledTableForgets(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	var st settledTable
	st.add(SettledTask{ID: "a", Expires: t0.Add(time.Minute)}, t0)
	st.add(SettledTask{ID: "b", Expires: t0.Add(2 * time.Minute)}, t0)
	if got := ids(st.list(t0.Add(time.Minute - 1))); got != "a b" {
		t.Errorf("before a's expiry: %q, want \"a b\"", got)
	}
	if got := ids(st.list(t0.Add(time.Minute))); got != "b" {
		t.Errorf("at a's expiry: %q, want \"b\"", got)
	}
	st.add(SettledTask{ID: "c", Expires: t0.Add(time.Hour)}, t0.Add(90*time.Second))
	if len(st.byID) != 2 || len(st.order) != 2 || st.order[0] != "b" {
		t.Errorf("after an add past a's expiry: %d entries, order %v; want 2, b first", len(st.byID), st.order)
	}

	st = settledTable{}
	for i := range MaxSettled + 1 {
		st.add(SettledTask{ID: strconv.Itoa(i), Expires: t0.Add(time.Hour)}, t0)
	}
	if _, ok := st.byID["0"]; ok || len(st.byID) != MaxSettled || len(st.order) != MaxSettled {
		t.Errorf("after %d adds: %d entries, the first kept %v; want %d, the first forgotten", MaxSettled+1, len(st.byID), ok, MaxSettled)
	}
}

// ids returns the IDs of ts, sorted, separated by spaces.
func ids(ts []SettledTask) string {
	s := make([]string, 0, len(ts))
	for _, t := range ts {
		s = append(s, t.ID)
	}
	slices.Sort(s)
	return strings.Join(s, " ")
}
