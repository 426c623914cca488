// Label values that come from a client's message, bounded: a method name
// the MCP specification does not define, or an error code outside the
// JSON-RPC and MCP ones, is recorded as Other, so a client cannot make a
// series per value it invents.

package metrics

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Other is the label value of a method or an error that is not one of the
// known ones (OpenTelemetry's convention for values outside a bounded set).
const Other = "_OTHER"

// ErrorTool is ErrorType's value for a tools/call whose result has
// isError: true (OpenTelemetry MCP semantic conventions, error.type).
const ErrorTool = "tool_error"

// methods are the JSON-RPC methods of MCP 2025-11-25 (schema.ts), requests
// and notifications of both directions, and of the sessionless era's
// subscriptions/listen.
var methods = map[string]bool{}

func init() {
	for _, m := range []string{
		"initialize", "ping",
		"tools/list", "tools/call",
		"resources/list", "resources/templates/list", "resources/read",
		"resources/subscribe", "resources/unsubscribe",
		"prompts/list", "prompts/get",
		"logging/setLevel", "completion/complete",
		"sampling/createMessage", "elicitation/create", "roots/list",
		"tasks/get", "tasks/list", "tasks/result", "tasks/cancel",
		"subscriptions/listen",
		"notifications/initialized", "notifications/cancelled",
		"notifications/progress", "notifications/message",
		"notifications/resources/list_changed", "notifications/resources/updated",
		"notifications/prompts/list_changed", "notifications/tools/list_changed",
		"notifications/roots/list_changed", "notifications/elicitation/complete",
		"notifications/tasks/status",
	} {
		methods[m] = true
	}
}

// Method returns m if it is a method MCP defines, else Other.
func Method(m string) string {
	if methods[m] {
		return m
	}
	return Other
}

// ErrorType returns the error.type label of a JSON-RPC error response with
// code: the code in decimal for the JSON-RPC 2.0 codes (-32700, -32600 to
// -32603) and MCP's (-32002 resource not found, -32042 URL elicitation
// required, -32001 session not found, -32000 server error), else Other.
func ErrorType(code int64) string {
	switch code {
	case -32700, -32600, -32601, -32602, -32603, -32000, -32001, -32002, -32042:
		return strconv.FormatInt(code, 10)
	}
	return Other
}

// ResponseErrorType returns the error.type of resp, the response to a
// request of method: "" for a result, ErrorTool for a tools/call result
// with isError true, else ErrorType of its JSON-RPC error code.
func ResponseErrorType(method string, resp *jsonrpc.Response) string {
	if resp.Error == nil {
		if method == "tools/call" && bytes.Contains(resp.Result, []byte(`"isError":true`)) {
			return ErrorTool
		}
		return ""
	}
	var we *jsonrpc.Error
	if errors.As(resp.Error, &we) {
		return ErrorType(we.Code)
	}
	return Other
}
