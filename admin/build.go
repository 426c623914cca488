// build.go holds which build of tidemark a process runs: what tidemark
// version prints, /healthz answers and the tidemark_build_info gauge
// labels.

package admin

import (
	"runtime/debug"
	"strconv"
)

// Build says which build of tidemark a process runs, from the information
// the Go toolchain embeds in the binary (runtime/debug.BuildInfo). A field
// the binary does not hold is empty: a build with -buildvcs=false, or
// outside a version-control checkout, has no revision and no time.
type Build struct {
	// Version is the main module's version: vX.Y.Z for a binary built by
	// `go install module@vX.Y.Z`, "(devel)" for one built from a checkout.
	Version string `json:"version"`
	// Revision is the commit the binary was built from (vcs.revision).
	Revision string `json:"revision"`
	// Time is that commit's time, RFC 3339 (vcs.time): the date of the
	// build's source.
	Time string `json:"time"`
	// Built is when the binary was linked, RFC 3339, when its build said
	// so (the Dockerfile passes BUILD_DATE); empty otherwise.
	Built string `json:"built,omitempty"`
	// Modified reports that the checkout had changes not committed
	// (vcs.modified).
	Modified bool `json:"modified"`
	// GoVersion is the Go toolchain that built the binary, e.g. go1.26.8.
	GoVersion string `json:"go_version"`
}

// ReadBuild returns the Build of the running binary; a zero Build when the
// binary holds no build information.
func ReadBuild() Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Build{}
	}
	return BuildOf(bi)
}

// BuildOf returns the Build that bi describes.
func BuildOf(bi *debug.BuildInfo) Build {
	b := Build{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified, _ = strconv.ParseBool(s.Value)
		}
	}
	return b
}
