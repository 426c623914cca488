//go:build race

package testenv

// raceEnabled reports whether this test binary was built with -race; the
// binaries Build makes then are too, so a data race in a server under test
// is reported as well.
const raceEnabled = true
