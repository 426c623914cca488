package main

// The key ring that seals requestState (`tidemark serve
// --request-state-*`): the demo's own, or with --stdio the backend's as
// the bridge relays it; where its keys come from, and the Sealer built
// from them (package requeststate; docs/requeststate.md, "Sealed
// requestState").

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/tidemark-mcp/tidemark/replay"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// stateConfig holds the requestState flags of `tidemark serve`.
type stateConfig struct {
	keysFile  string // empty: $TIDEMARK_REQUEST_STATE_KEYS, else a random key
	ttl       time.Duration
	singleUse bool
	usedMax   int
}

// stateFlags declares the requestState flags on fs.
func stateFlags(fs *flag.FlagSet, c *stateConfig) {
	fs.StringVar(&c.keysFile, "request-state-keys", "", "file of the key ring that seals requestState, shared by every replica: one base64 32-byte key per line, each optionally followed by the RFC 3339 time it starts to seal (path; empty: $"+requeststate.EnvKeys+", else a random key of this process)")
	fs.DurationVar(&c.ttl, "request-state-ttl", requeststate.DefaultTTL, "how long a sealed requestState is accepted after it is issued (duration)")
	fs.BoolVar(&c.singleUse, "request-state-single-use", false, "accept each requestState once: with --redis the replicas remember the used ones in Redis until they expire; without, this process does, so another process may accept a replay once more")
	fs.IntVar(&c.usedMax, "request-state-used-max", requeststate.DefaultLedgerEntries, "with --request-state-single-use and no --redis: most used requestStates remembered; beyond it retries are refused with reason capacity until some expire (states)")
}

// check validates the requestState flags; the error is a usage error. An
// --upstream server (upstream) seals its own requestState.
func (c *stateConfig) check(upstream bool) error {
	switch {
	case upstream && (c.keysFile != "" || c.singleUse):
		return errors.New("--request-state-keys and --request-state-single-use apply to the demo server and --stdio, not to --upstream")
	case c.ttl <= 0:
		return fmt.Errorf("--request-state-ttl %v: want a positive duration", c.ttl)
	case c.usedMax <= 0:
		return fmt.Errorf("--request-state-used-max %d: want a positive number of states", c.usedMax)
	case c.keysFile != "":
		return checkFile("request-state-keys", c.keysFile, "a key ring file: one base64 32-byte key per line")
	}
	return nil
}

// checkGiven refuses --request-state-used-max with --redis (inFleet),
// where it does nothing, as its help says: the used states are remembered
// in Redis. (Without --request-state-single-use it is refused by
// checkOnlyWith.) given reports whether a flag was given, on the command
// line or by the environment.
func (c *stateConfig) checkGiven(given func(name string) bool, inFleet bool) error {
	if given("request-state-used-max") && inFleet {
		return errors.New("--request-state-used-max applies without --redis only: a fleet remembers the used requestStates in Redis until they expire; leave --request-state-used-max out")
	}
	return nil
}

// sealer loads the key ring and returns the Sealer of the demo, or of the
// stdio gateway's bridge. Without a configured ring it uses a random key
// and logs that retries must come back to this process: at WARN in a fleet,
// where they need not. With --request-state-single-use the used states are
// remembered in the fleet's Redis, or without --redis in this process.
func (c *stateConfig) sealer(logger *slog.Logger, fleet *fleetConfig) (*requeststate.Sealer, error) {
	inFleet := fleet.redisURL != ""
	ring, source, err := requeststate.LoadRing(c.keysFile)
	if err != nil {
		return nil, fmt.Errorf("--request-state-keys: %w", err)
	}
	if ring == nil {
		ring = requeststate.RandomRing()
		level := slog.LevelInfo
		if inFleet {
			level = slog.LevelWarn
		}
		logger.Log(context.Background(), level, "request state key is random to this process: the retry of an input-required request (protocol 2026-07-28) must come back to this process; share a key ring with --request-state-keys or $"+requeststate.EnvKeys,
			"key", ring.IDs()[0])
	} else {
		logger.Info("request state keys", "source", source, "keys", ring.IDs(), "sealing", ring.SealingID(time.Now()))
		for _, g := range ring.SameStart() {
			start := "always"
			if !g.NotBefore.IsZero() {
				start = g.NotBefore.Format(time.RFC3339)
			}
			logger.Warn("request state keys start to seal at the same time: the later in each replica's ring seals, "+
				"so replicas whose rings order them differently seal with different keys; give each key its own not-before time",
				"reason", replay.ReasonAmbiguousKey, "keys", g.IDs, "not_before", start)
		}
		if c.keysFile != "" {
			warnReadable(logger, "request state key file", c.keysFile)
		}
	}
	opts := requeststate.Options{TTL: c.ttl, Logger: logger}
	switch {
	case c.singleUse && inFleet:
		// The client lives as long as the process.
		rdb, err := fleet.redisClient()
		if err != nil {
			return nil, err
		}
		opts.Ledger = requeststate.NewRedisLedger(rdb, "")
	case c.singleUse:
		opts.Ledger = requeststate.NewMemoryLedger(c.usedMax)
	}
	return requeststate.New(ring, opts), nil
}

// requestStateSealer returns the Sealer of the demo server, or of the
// stdio gateway's bridge, or nil with --upstream, whose server seals its
// own requestState and whose requests pass through unchanged.
func (c *serveConfig) requestStateSealer(logger *slog.Logger) (*requeststate.Sealer, error) {
	if c.upstream.url != "" {
		return nil, nil
	}
	return c.state.sealer(logger, &c.fleet)
}

// warnReadable logs a warning when others than the owner of the file at
// path, which holds a secret (what names it), may read it.
func warnReadable(logger *slog.Logger, what, path string) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		logger.Warn("the "+what+" is readable by others than its owner: chmod 600 it", "file", path, "mode", fi.Mode().Perm().String())
	}
}
