// hostshape.go holds the rule by which the bridge, toward a server of the
// sessionless era, gives the host the server's answers and notifications
// in the shape of the host's own revision (DESIGN.md, "The connect
// bridge"): without the members that MCP 2026-07-28 added.

package connect

import (
	"encoding/json"
	"slices"

	"github.com/tidemark-mcp/tidemark/internal/wire"
)

// Members of a result, and _meta keys, that MCP 2026-07-28 defines and no
// earlier revision has (schema/2026-07-28/schema.ts against
// schema/2025-11-25/schema.ts; 2025-11-25 adds none of them to its
// predecessors).
var (
	// newerResultMembers are members of every result: resultType
	// (Result), which the SDK and client.TaskTransport have read by then
	// ("complete" once input-required rounds and tasks are done).
	newerResultMembers = []string{"resultType"}
	// newerCacheMembers are the members of CacheableResult: the results
	// of cacheableMethods.
	newerCacheMembers = []string{"ttlMs", "cacheScope"}
	// cacheableMethods are the methods whose result is a CacheableResult.
	cacheableMethods = []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
	// newerResultMeta is the _meta key of ResultMetaObject: the server's
	// Implementation, which a host of the stateful era had from
	// initialize's serverInfo.
	newerResultMeta = []string{"io.modelcontextprotocol/serverInfo"}
	// newerNotificationMeta is the _meta key of NotificationMetaObject:
	// the id of the subscriptions/listen request of the bridge's that
	// carried the notification, an id the host never sent.
	newerNotificationMeta = []string{"io.modelcontextprotocol/subscriptionId"}
)

// ResultForHost returns result, a 2026-07-28 server's result of a request
// of method, in the shape of the revisions the host speaks in the
// sessionless mode (2024-11-05 to 2025-11-25): without resultType; for a
// CacheableResult (tools/list, prompts/list, resources/list,
// resources/templates/list, resources/read) without ttlMs and cacheScope;
// and without _meta["io.modelcontextprotocol/serverInfo"], the _meta
// dropped once that leaves it empty. Every other member, _meta key and
// nested value stays as the server sent it; a result with none of these
// members, or that is no JSON object, is returned as it is.
func ResultForHost(method string, result json.RawMessage) json.RawMessage {
	drop := newerResultMembers
	if slices.Contains(cacheableMethods, method) {
		drop = slices.Concat(drop, newerCacheMembers)
	}
	return without(result, drop, newerResultMeta)
}

// NotificationForHost returns params, those of a 2026-07-28 server's
// notification, in the shape of the host's revision: without
// _meta["io.modelcontextprotocol/subscriptionId"], the _meta dropped once
// that leaves it empty; otherwise as ResultForHost.
func NotificationForHost(params json.RawMessage) json.RawMessage {
	return without(params, nil, newerNotificationMeta)
}

// without returns the JSON object raw without its members members and
// without the keys metaKeys of its _meta; raw itself when it has none of
// them or is no JSON object.
func without(raw json.RawMessage, members, metaKeys []string) json.RawMessage {
	o := wire.DecodeObject(raw)
	if o == nil {
		return raw
	}
	changed := false
	for _, k := range members {
		if _, ok := o[k]; ok {
			delete(o, k)
			changed = true
		}
	}
	if meta := wire.DecodeObject(o["_meta"]); len(meta) > 0 {
		n := len(meta)
		for _, k := range metaKeys {
			delete(meta, k)
		}
		switch {
		case len(meta) == n:
		case len(meta) == 0:
			delete(o, "_meta")
			changed = true
		default:
			data, err := json.Marshal(meta)
			if err != nil {
				return raw
			}
			o["_meta"] = data
			changed = true
		}
	}
	if !changed {
		return raw
	}
	data, err := json.Marshal(o)
	if err != nil {
		return raw
	}
	return data
}
