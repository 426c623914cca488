// Package fanout carries the notifications that MCP subscriptions/listen
// streams deliver (protocol 2026-07-28, basic/patterns/subscriptions:
// notifications/resources/updated for the subscribed URIs and the tools,
// prompts and resources list_changed notifications) from the replica that
// raises one to the listeners of every replica of a fleet, each exactly
// once.
//
// A Bus is attached to the *mcp.Server of each replica (Attach) and raises
// notifications for the whole fleet (Raise). Without Redis it serves one
// process: Raise delivers to this process's listeners and sessions. With
// Redis (Options.Redis) Raise also appends the notification to a Redis
// Stream that every replica's Bus reads; each replica delivers every entry
// it did not raise itself, once, to its own listeners. A notification
// received from Redis is never appended again, so nothing loops.
//
// What a listener can miss: notifications raised while it holds no stream.
// The protocol keeps no subscription state across reconnections (a client
// sends subscriptions/listen again, to any replica), so a listener hears
// what is raised after the server acknowledged its stream, and nothing
// raised before or while it was reconnecting. A replica whose connection to
// Redis drops does not lose entries: it reads on from the last one it
// delivered when Redis answers again, unless Options.MaxLen newer entries
// have pushed that one out of the stream meanwhile (it then logs reason
// notifications_lost). Nothing that raises or delivers a notification
// waits on a listener's connection: each stream has a queue of its own
// (queueLen) and, while the queue holds any, a goroutine that writes it;
// a stream whose client does
// not read fills its queue and is cut (reason listener_stalled), and its
// client listens again.
//
// Sessions of the stateful revisions (2025-11-25 and earlier) on an
// attached server get the same notifications the go-sdk gives them:
// resources/updated for the URIs they subscribed to (resources/subscribe),
// and every list change.
package fanout

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"
)

// Methods of the notifications a Bus carries (MCP 2026-07-28,
// basic/patterns/subscriptions, "Notification Filter").
const (
	ResourceUpdated      = "notifications/resources/updated"
	ToolsListChanged     = "notifications/tools/list_changed"
	PromptsListChanged   = "notifications/prompts/list_changed"
	ResourcesListChanged = "notifications/resources/list_changed"
)

// Defaults of Options.
const (
	// DefaultKey is the Redis key of the notification stream.
	DefaultKey = "tidemark:notifications"
	// DefaultMaxLen is how many entries the stream keeps, about.
	DefaultMaxLen = 10000
	// DefaultBlock is the longest one blocking read of the stream lasts.
	DefaultBlock = time.Second
)

// ErrClosed is returned by Raise after Close.
var ErrClosed = errors.New("fanout: bus closed")

// Notification is one notification for the listeners of the fleet.
type Notification struct {
	// Method is ResourceUpdated, ToolsListChanged, PromptsListChanged or
	// ResourcesListChanged.
	Method string
	// URI is the resource that changed (ResourceUpdated only; it may be a
	// sub-resource of one a client subscribed to, MCP 2026-07-28,
	// schema "ResourceUpdatedNotification", but delivery matches it to the
	// subscribed URIs exactly, as the go-sdk does).
	URI string
}

// check returns an error when n is not a notification a Bus carries.
func (n Notification) check() error {
	switch n.Method {
	case ResourceUpdated:
		if n.URI == "" {
			return errors.New("fanout: resources/updated needs a URI")
		}
	case ToolsListChanged, PromptsListChanged, ResourcesListChanged:
		if n.URI != "" {
			return fmt.Errorf("fanout: %s carries no URI (got %q)", n.Method, n.URI)
		}
	default:
		return fmt.Errorf("fanout: %q is not a notification of subscriptions/listen streams", n.Method)
	}
	return nil
}

// Options configures a Bus. The zero value serves one process.
type Options struct {
	// Redis, when set, carries notifications between the replicas that
	// share it, through a Redis Stream at Key. The Bus does not close it.
	// Default nil: this process only.
	Redis redis.UniversalClient
	// Key is the Redis key of the stream. Every replica of one fleet uses
	// the same. Default DefaultKey, "tidemark:notifications".
	Key string
	// MaxLen is how many entries the stream keeps (trimmed approximately,
	// Redis XADD MAXLEN ~): the most notifications a replica that cannot
	// read Redis for a while can catch up on. Default DefaultMaxLen, 10000.
	MaxLen int64
	// Block bounds each blocking read of the stream, and so how long Close
	// waits for the reader. Default DefaultBlock, 1 second.
	Block time.Duration
	// Logger receives the lines of the reader (Redis unreachable, entries
	// lost) and of failed deliveries. Default slog.Default().
	Logger *slog.Logger
}

// Bus delivers notifications to the listeners of the servers attached to
// it, and with Redis to those of every replica. Create it with New; it is
// safe for concurrent use.
type Bus struct {
	origin string // marks the entries this Bus appends
	opts   Options
	logger *slog.Logger

	mu        sync.Mutex
	servers   map[*mcp.Server]mcp.MethodHandler // attached → the sending chain below the Bus's middleware
	listeners map[*listener]struct{}
	streams   map[streamKey]*listener // the listeners acknowledged, by stream
	closed    bool
	stop      chan struct{} // closed by Close: the listeners' goroutines return

	cancel context.CancelFunc
	done   chan struct{} // closed when the reader has returned
}

// New returns a Bus for opts. With Options.Redis it first reads the ID of
// the stream's newest entry (every entry appended after it will be
// delivered here) and starts the reader; it fails when Redis cannot be
// reached within ctx.
func New(ctx context.Context, opts Options) (*Bus, error) {
	if opts.Key == "" {
		opts.Key = DefaultKey
	}
	if opts.MaxLen <= 0 {
		opts.MaxLen = DefaultMaxLen
	}
	if opts.Block <= 0 {
		opts.Block = DefaultBlock
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	b := &Bus{
		origin:    strings.ToLower(rand.Text()),
		opts:      opts,
		logger:    opts.Logger,
		servers:   make(map[*mcp.Server]mcp.MethodHandler),
		listeners: make(map[*listener]struct{}),
		streams:   make(map[streamKey]*listener),
		stop:      make(chan struct{}),
		cancel:    func() {},
		done:      make(chan struct{}),
	}
	if opts.Redis == nil {
		close(b.done)
		return b, nil
	}
	pos, err := newest(ctx, opts.Redis, opts.Key)
	if err != nil {
		return nil, fmt.Errorf("fanout: read stream %s: %w", opts.Key, err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	go func() {
		defer close(b.done)
		b.read(rctx, pos)
	}()
	return b, nil
}

// Raise delivers n to the listeners and sessions of the servers attached to
// this Bus, then, with Redis, appends it to the stream for the other
// replicas. It changes nothing else: a list that changed on this replica's
// server through AddTool and the like is already notified to this
// replica's sessions by the go-sdk. Errors: n is not a notification a Bus
// carries; the Bus is closed (ErrClosed); Redis did not take the entry (the
// notification then reached this replica's listeners only).
func (b *Bus) Raise(ctx context.Context, n Notification) error {
	if err := n.check(); err != nil {
		return err
	}
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return ErrClosed
	}
	b.deliver(ctx, n)
	if b.opts.Redis == nil {
		return nil
	}
	if err := b.publish(ctx, n); err != nil {
		return fmt.Errorf("fanout: %s reached this replica's listeners only: %w", n.Method, err)
	}
	return nil
}

// Close stops reading the stream (waiting up to Options.Block for the
// reader) and makes Raise fail. Listeners keep their streams; they hear
// nothing more through this Bus: what waits in their queues is dropped,
// and their goroutines return (one blocked in a write returns once the
// write does), while what the attached servers send themselves goes out
// as if no Bus were attached. Close is idempotent.
func (b *Bus) Close() error {
	b.mu.Lock()
	if !b.closed {
		close(b.stop)
	}
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	<-b.done
	return nil
}
