// directory.go holds the replica directory: where each replica of a fleet
// serves MCP, so that a request can be forwarded to a session's owner.

package fleet

import "context"

// Directory finds the URL at which a replica serves MCP, so that requests
// for the sessions it owns can be forwarded to it. store/redis implements
// it (store/redis.Store.Lookup, with replicas announcing themselves).
type Directory interface {
	// Lookup returns the MCP endpoint URL of replica, e.g.
	// "http://10.0.0.7:8080/mcp". An error wrapping store.ErrUnavailable
	// means the directory cannot be reached (503 unavailable); any other
	// error means the replica is not known (treated as unreachable).
	Lookup(ctx context.Context, replica string) (string, error)
}
