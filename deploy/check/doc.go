// Package check tests Tidemark's deployment files against the binary they
// deploy: the Dockerfile (parsed with BuildKit's parser, and its go build
// run here as the image runs it), the compose fleet (deploy/compose, loaded
// with compose-go), the Kubernetes manifests (deploy/kubernetes, decoded
// strictly into the Kubernetes API types) and the systemd unit
// (deploy/systemd, read with go-systemd and checked by systemd-analyze).
// Each deployment's command line also runs, against real Redis sentinels
// where it is a fleet. It is a module of its own so that those parsers
// stay out of Tidemark's dependencies; it has no Go API. scripts/test.sh
// runs its tests (docs/deploying.md, "How these files are checked").
package check
