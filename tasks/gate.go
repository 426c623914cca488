// gate.go holds which requests of the sessionless era take part in tasks
// (DESIGN.md, "Tasks: the executor rule"): Gate, and the tools' Support.
// testdata/gate lists every case.

package tasks

// ExtensionID is the identifier of the Tasks extension: the key under
// capabilities.extensions in server/discover, and under the extensions of
// a request's io.modelcontextprotocol/clientCapabilities (SEP-2663,
// "Extension Identifier").
const ExtensionID = "io.modelcontextprotocol/tasks"

// Support is how a tool takes part in tasks, as the library user or the
// operator declares it (the words of the 2025-11-25 execution.taskSupport,
// which the extension leaves to the server).
type Support uint8

const (
	// Forbidden: the tool always answers at once (the default).
	Forbidden Support = iota
	// Optional: the tool runs as a task for a request that declared the
	// extension, and at once for any other.
	Optional
	// Required: the tool runs only as a task; a request that did not
	// declare the extension is refused.
	Required
)

// String returns the support's word: "forbidden", "optional", "required".
func (s Support) String() string {
	switch s {
	case Optional:
		return "optional"
	case Required:
		return "required"
	}
	return "forbidden"
}

// ParseSupport returns the support whose word is w.
func ParseSupport(w string) (Support, bool) {
	for s := Forbidden; s <= Required; s++ {
		if s.String() == w {
			return s, true
		}
	}
	return 0, false
}

// Admission is what Gate decided for a request.
type Admission uint8

const (
	// Pass: the request is no concern of tasks; the engine answers it.
	Pass Admission = iota
	// Create: a tools/call that runs as a task: create the task, answer
	// CreateTaskResult, run the call.
	Create
	// Serve: tasks/get, tasks/update or tasks/cancel, answered from the
	// task store.
	Serve
	// MissingCapability: refused with JSON-RPC error -32021, naming the
	// extension in data.requiredCapabilities.extensions (SEP-2663,
	// "Capability Negotiation").
	MissingCapability
	// MethodNotFound: a method of the 2025-11-25 tasks that the extension
	// removed (tasks/result, tasks/list): JSON-RPC error -32601.
	MethodNotFound
)

// String returns the admission's lowercase name.
func (a Admission) String() string {
	switch a {
	case Create:
		return "create"
	case Serve:
		return "serve"
	case MissingCapability:
		return "missing-capability"
	case MethodNotFound:
		return "method-not-found"
	}
	return "pass"
}

// Gate decides a request of the sessionless era with method method;
// support is the called tool's Support (tools/call only), and declared
// reports whether the request itself declared the extension in its
// client capabilities. Only the request's own declaration counts: the
// sessionless era has no session to remember one (SEP-2663, "Capability
// Negotiation"). A legacy task parameter on tools/call is not read: it
// neither creates a task nor fails the call.
//
// The stateful era (2025-11-25 and earlier) never reaches Gate: the
// extension is not defined there.
func Gate(method string, support Support, declared bool) Admission {
	switch method {
	case "tools/call":
		switch {
		case support == Forbidden:
			return Pass
		case declared:
			return Create
		case support == Required:
			return MissingCapability
		}
		return Pass
	case "tasks/get", "tasks/update", "tasks/cancel":
		if declared {
			return Serve
		}
		return MissingCapability
	case "tasks/result", "tasks/list":
		return MethodNotFound
	}
	return Pass
}
