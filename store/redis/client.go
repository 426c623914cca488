package redis

// client.go turns Options.URL into go-redis clients: one Redis server, a
// primary that Redis Sentinel manages, or a Redis Cluster, each behind
// goredis.UniversalClient. The URL forms are go-redis's own parsers':
//
//	redis://HOST:PORT/DB                                    ParseURL: one server
//	redis://S1:PORT/DB?master_name=NAME&addr=S2:PORT&addr=S3:PORT
//	                                                        ParseFailoverURL: Sentinel
//	redis://N1:PORT?addr=N2:PORT&addr=N3:PORT               ParseClusterURL: Cluster
//
// A master_name parameter makes the URL a Sentinel URL (host and addr
// parameters are sentinels); addr parameters without master_name make it
// a Cluster URL (host and addr parameters are seed nodes). A Cluster with
// a single seed node names it again as an addr parameter:
// redis://N1:PORT?addr=N1:PORT.

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// topology says which kind of Redis deployment a URL names.
type topology int

const (
	topoSingle   topology = iota // one server
	topoSentinel                 // a primary managed by Redis Sentinel
	topoCluster                  // a Redis Cluster
)

// endpoint is a parsed Options.URL: exactly one of the three option
// structs is set, as kind says.
type endpoint struct {
	kind     topology
	single   *goredis.Options
	failover *goredis.FailoverOptions
	cluster  *goredis.ClusterOptions
}

// parseEndpoint parses raw with the go-redis parser its query selects
// (see the file comment). Errors are go-redis's, or url.Parse's.
func parseEndpoint(raw string) (endpoint, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return endpoint{}, err
	}
	q := u.Query()
	switch {
	case q.Has("master_name"):
		o, err := goredis.ParseFailoverURL(raw)
		return endpoint{kind: topoSentinel, failover: o}, err
	case q.Has("addr"):
		o, err := goredis.ParseClusterURL(raw)
		return endpoint{kind: topoCluster, cluster: o}, err
	}
	o, err := goredis.ParseURL(raw)
	return endpoint{kind: topoSingle, single: o}, err
}

// String names the endpoint for errors and logs: its addresses, without
// credentials.
func (e endpoint) String() string {
	switch e.kind {
	case topoSentinel:
		return fmt.Sprintf("sentinels %v, master %q", e.failover.SentinelAddrs, e.failover.MasterName)
	case topoCluster:
		return fmt.Sprintf("cluster seeds %v", e.cluster.Addrs)
	}
	return e.single.Addr
}

// tuning is what the store sets on every client it builds, whatever the
// URL says: see New for why each setting is so.
type tuning struct {
	timeout    time.Duration
	pool       int  // connections (per node on a Cluster)
	ctxTimeout bool // honour contexts' deadlines on sockets
}

// client builds a client for e with t applied: a *goredis.Client for one
// server or Sentinel (go-redis's failover client follows the primary that
// the sentinels name), a *goredis.ClusterClient for a Cluster.
func (e endpoint) client(t tuning) goredis.UniversalClient {
	switch e.kind {
	case topoSentinel:
		o := *e.failover
		// go-redis appends discovered sentinels and nodes to these
		// slices: each client needs an array of its own.
		o.SentinelAddrs = slices.Clone(o.SentinelAddrs)
		t.apply(&o.ClientName, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout,
			nil, &o.ContextTimeoutEnabled, &o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
		return goredis.NewFailoverClient(&o)
	case topoCluster:
		o := *e.cluster
		o.Addrs = slices.Clone(o.Addrs)
		t.apply(&o.ClientName, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout,
			&o.MaintNotificationsConfig, &o.ContextTimeoutEnabled, &o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
		return goredis.NewClusterClient(&o)
	}
	o := *e.single
	t.apply(&o.ClientName, &o.MaxRetries, &o.DialerRetries, &o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout,
		&o.MaintNotificationsConfig, &o.ContextTimeoutEnabled, &o.PoolSize, &o.MaxActiveConns, &o.PipelinePoolSize)
	return goredis.NewClient(&o)
}

// apply sets the fields of one options struct, given by pointer since
// go-redis's three option types share the names but not a type. maint is
// nil for Sentinel, whose client always disables maintenance
// notifications.
func (t tuning) apply(name *string, retries, dialRetries *int, dial, read, write *time.Duration,
	maint **maintnotifications.Config, ctxTimeout *bool, pool, active, pipeline *int) {
	*name = "tidemark"
	// Resending a script whose reply was lost could apply it twice.
	*retries = -1
	// One dial attempt per call: with Redis down a request should fail
	// (503) within one dial timeout, not after go-redis's five attempts.
	*dialRetries = 1
	*dial, *read, *write = t.timeout, t.timeout, t.timeout
	// Maintenance notifications are a Redis Enterprise/Cloud feature;
	// skip the handshake on every new connection.
	if maint != nil {
		*maint = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	*ctxTimeout = t.ctxTimeout
	*pool, *active = t.pool, t.pool
	// Transactions and pipelines share the ordinary pool, so pool is the
	// whole count of connections.
	*pipeline = -1
}

// primaryFor returns the client of the server that holds key's slot: c
// itself unless c is a Cluster client. Commands whose effect depends on
// the connection (WAIT, CLIENT ID, CLIENT UNBLOCK) go through it.
func primaryFor(ctx context.Context, c goredis.UniversalClient, key string) (*goredis.Client, error) {
	if cc, ok := c.(*goredis.ClusterClient); ok {
		return cc.MasterForKey(ctx, key)
	}
	return c.(*goredis.Client), nil
}

// CheckURL returns the error of the parser url's form selects (see the
// file comment) when it does not read url, else nil. It connects to
// nothing.
func CheckURL(url string) error {
	_, err := parseEndpoint(url)
	return err
}

// NewClient returns a go-redis client of url, in any form Options.URL
// accepts (one server, Sentinel, Cluster), with go-redis's default
// settings and whatever url sets: for the parts of a fleet that share the
// store's Redis without going through a Store (the notification bus, the
// requestState ledger). The caller closes it. The error is the parser's,
// for a url that none of the three forms reads.
func NewClient(url string) (goredis.UniversalClient, error) {
	ep, err := parseEndpoint(url)
	if err != nil {
		return nil, err
	}
	switch ep.kind {
	case topoSentinel:
		return goredis.NewFailoverClient(ep.failover), nil
	case topoCluster:
		return goredis.NewClusterClient(ep.cluster), nil
	}
	return goredis.NewClient(ep.single), nil
}
