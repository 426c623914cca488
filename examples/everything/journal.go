package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/taskrun"
	"github.com/tidemark-mcp/tidemark/tasks"
)

// journalTool is how the journal fixture runs: as a task for a request
// that declared the extension, never again after its executor was lost
// (it is not idempotent: each execution appends a line).
var journalTool = taskrun.Tool{Support: tasks.Optional}

type journalArgs struct {
	Label string `json:"label" jsonschema:"the line to append, and the answer"`
	MS    int    `json:"ms,omitempty" jsonschema:"how long to work after appending, in milliseconds"`
}

// addJournal registers the journal tool, whose every execution appends
// one line, its label, to the file at path (created if missing, synced
// before the tool goes on), then works for ms milliseconds (stopping when
// cancelled) and answers the label. The file counts executions: a crash
// test reads it to see that no call ran twice.
func addJournal(s *mcp.Server, path string) {
	var mu sync.Mutex // one append at a time, so lines never interleave
	mcp.AddTool(s, &mcp.Tool{
		Name:        "journal",
		Description: "Appends `label` and a newline to the journal file (synced), works for `ms` milliseconds, then answers the label.",
	}, func(ctx context.Context, _ *mcp.CallToolRequest, a journalArgs) (*mcp.CallToolResult, any, error) {
		mu.Lock()
		err := appendLine(path, a.Label)
		mu.Unlock()
		if err != nil {
			return nil, nil, err
		}
		if err := pause(ctx, time.Duration(a.MS)*time.Millisecond); err != nil {
			return nil, nil, err
		}
		return textResult("%s", a.Label), nil, nil
	})
}

// appendLine appends line and a newline to the file at path and syncs it.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	_, err = f.WriteString(line + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("journal %s: %w", path, err)
	}
	return nil
}
