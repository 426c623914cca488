//go:build !race

package testenv

// raceEnabled reports whether this test binary was built with -race.
const raceEnabled = false
