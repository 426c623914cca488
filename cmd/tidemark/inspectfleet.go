package main

// `tidemark inspect --fleet`: the sessions of every replica of a fleet,
// read from its Redis (the replica directory and the session records;
// package store/redis), printed with their owner, generation and lease.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/admin"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/store"
	"github.com/tidemark-mcp/tidemark/store/redis"
)

// checkFleet checks the --fleet flags and resolves --redis to a URL with
// its password (withRedisPassword): --redis is required with --fleet and
// applies with it only, as host:port or a URL go-redis reads.
func (c *inspectConfig) checkFleet() error {
	switch {
	case c.fleet && c.redisURL == "":
		return errors.New("--fleet needs --redis: want the fleet's Redis, as tidemark serve --redis names it (or host:port)")
	case !c.fleet && c.redisURL != "":
		return fmt.Errorf("--redis %q: want --fleet too: --redis applies to --fleet only", redact.URL(c.redisURL))
	}
	if c.redisURL != "" && !strings.Contains(c.redisURL, "://") {
		if _, port, err := net.SplitHostPort(c.redisURL); err != nil || port == "" {
			return fmt.Errorf("--redis %q: want host:port or a redis:// URL, e.g. 127.0.0.1:6379 or redis://127.0.0.1:6379/0", c.redisURL)
		}
		c.redisURL = "redis://" + c.redisURL + "/0"
	}
	if c.redisURL != "" {
		if err := redis.CheckURL(c.redisURL); err != nil {
			return fmt.Errorf("--redis %q: %s: %s", redact.URL(c.redisURL), redact.URLError(c.redisURL, err), urlForms)
		}
	}
	u, err := withRedisPassword(c.redisURL, c.redisPassFile, os.LookupEnv)
	if err != nil {
		return err
	}
	c.redisURL = u
	return nil
}

// inspectFleet prints the fleet's replicas and sessions (Fleet): those
// whose token starts with prefix, or without one the --recent most
// recently used. Exit codes as inspect's.
func inspectFleet(c *inspectConfig, prefix string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// go-redis reports each failed dial on its own logger (stderr), before
	// this command's one-line error that says the same.
	goredis.SetLogger(redisLog{slog.New(slog.DiscardHandler)})
	st, err := redis.New(ctx, redis.Options{URL: c.redisURL})
	if err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: --redis %s: %s (is it the Redis of tidemark serve --redis?)\n", redact.URL(c.redisURL), redact.URLError(c.redisURL, err))
		return 1
	}
	defer st.Close()
	now := time.Now()
	f, err := readFleet(ctx, st, prefix, c.recent, now)
	if err != nil {
		fmt.Fprintf(stderr, "tidemark inspect: --redis %s: %s\n", redact.URL(c.redisURL), redact.URLError(c.redisURL, err))
		return 1
	}
	if prefix != "" && f.Count == 0 {
		fmt.Fprintf(stderr, "tidemark inspect: no session in Redis has a token starting with %q; tidemark inspect --fleet lists them\n", prefix)
		return 1
	}
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(f)
		return 0
	}
	printFleet(stdout, f, prefix, now)
	return 0
}

// readFleet reads the directory and the session records: every record
// whose token starts with prefix, or without one the n most recently used
// (the others counted), most recent first. Memory stays O(n) however many
// sessions the fleet holds.
func readFleet(ctx context.Context, st *redis.Store, prefix string, n int, now time.Time) (admin.Fleet, error) {
	reps, err := st.Replicas(ctx)
	if err != nil {
		return admin.Fleet{}, err
	}
	var f admin.Fleet
	owned := map[string]int{}
	var kept []store.Record
	newest := func(a, b store.Record) int { return b.LastSeen.Compare(a.LastSeen) }
	err = st.EachSession(ctx, func(r store.Record) error {
		if !strings.HasPrefix(r.Token, prefix) {
			return nil
		}
		f.Count++
		owned[r.Owner]++
		kept = append(kept, r)
		if prefix == "" && len(kept) > 4*n+64 {
			slices.SortFunc(kept, newest)
			kept = kept[:n]
		}
		return nil
	})
	if err != nil {
		return admin.Fleet{}, err
	}
	slices.SortFunc(kept, newest)
	if prefix == "" && len(kept) > n {
		kept = kept[:n]
	}
	f.Sessions = make([]admin.FleetSession, 0, len(kept))
	for _, r := range kept {
		s := admin.FleetSession{Session: r.Token[:min(8, len(r.Token))], Owner: r.Owner, Generation: r.Generation, Created: r.Created}
		if !r.LeaseUntil.IsZero() {
			lease := r.LeaseUntil
			s.LeaseExpiry = &lease
		}
		if !r.LastSeen.IsZero() {
			s.IdleSeconds = now.Sub(r.LastSeen).Seconds()
		}
		f.Sessions = append(f.Sessions, s)
	}
	f.Replicas = make([]admin.FleetReplica, 0, len(reps)+len(owned))
	for _, r := range reps {
		f.Replicas = append(f.Replicas, admin.FleetReplica{ID: r.ID, URL: r.URL, TTLSeconds: r.TTL.Seconds(), Sessions: owned[r.ID]})
		delete(owned, r.ID)
	}
	var gone []admin.FleetReplica
	for id, count := range owned {
		gone = append(gone, admin.FleetReplica{ID: id, Sessions: count})
	}
	slices.SortFunc(gone, func(a, b admin.FleetReplica) int { return cmp.Compare(a.ID, b.ID) })
	f.Replicas = append(f.Replicas, gone...)
	return f, nil
}

// printFleet prints f, read at now, as two tables: the replicas, then the
// sessions.
func printFleet(w io.Writer, f admin.Fleet, prefix string, now time.Time) {
	announced := 0
	for _, r := range f.Replicas {
		if r.URL != "" {
			announced++
		}
	}
	fmt.Fprintf(w, "%d replicas in the directory, %d sessions in Redis", announced, f.Count)
	if prefix != "" {
		fmt.Fprintf(w, " with a token starting with %q", prefix)
	} else if len(f.Sessions) < f.Count {
		fmt.Fprintf(w, "; the %d most recently used below", len(f.Sessions))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tURL\tSESSIONS")
	for _, r := range f.Replicas {
		id, url := r.ID, r.URL
		if id == "" {
			id = "(none)"
		}
		if url == "" {
			url = "(not in the directory)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\n", id, url, r.Sessions)
	}
	tw.Flush()
	if len(f.Sessions) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tOWNER\tGENERATION\tLEASE\tIDLE")
	for _, s := range f.Sessions {
		owner := s.Owner
		if owner == "" {
			owner = "(none)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Session, owner, s.Generation, leaseAge(s.LeaseExpiry, now), seconds(s.IdleSeconds))
	}
	tw.Flush()
}

// leaseAge says where a lease stands at now: "expires in 8.2s", "lapsed
// 3.1s ago" (its owner stopped renewing it: another replica takes the
// session over at its next request), or "none" for a claim that lasts as
// long as its owner process; rounded to 100 ms.
func leaseAge(expiry *time.Time, now time.Time) string {
	if expiry == nil {
		return "none"
	}
	d := expiry.Sub(now).Round(100 * time.Millisecond)
	if d >= 0 {
		return "expires in " + d.String()
	}
	return "lapsed " + (-d).String() + " ago"
}
