// host.go holds the bridge's stdio connection toward the host: newline
// framed JSON-RPC (MCP 2025-11-25, "Transports", stdio) that answers a
// line it cannot decode with a JSON-RPC error and reads on.

package connect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxHostLine bounds one line (one message) from the host, in bytes; a
// longer line is answered with a parse error and skipped.
const MaxHostLine = 16 << 20

// HostTransport is the host's end of the bridge: messages one per line
// on Reader (the host's stdout, the bridge's stdin) and Writer (the
// bridge's stdout). Unlike mcp.StdioTransport, whose decoder stops at
// the first frame it cannot decode, a line that is not a JSON-RPC 2.0
// message gets an error answer (JSON-RPC 2.0, section 5.1: -32700 parse
// error when it is not JSON, -32600 invalid request otherwise; id null
// unless the line has a valid id) and the next line is read.
type HostTransport struct {
	Reader io.ReadCloser
	Writer io.WriteCloser
	// Logger receives one line per refused line. Nil: slog.Default().
	Logger *slog.Logger
}

// Connect implements mcp.Transport; it starts reading Reader.
func (t *HostTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &hostConn{r: t.Reader, w: t.Writer, logger: t.Logger, lines: make(chan hostLine), closed: make(chan struct{})}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	go c.read()
	return c, nil
}

// hostLine is one message read, or the error that ended the reading.
type hostLine struct {
	msg jsonrpc.Message
	err error
}

type hostConn struct {
	r      io.ReadCloser
	w      io.WriteCloser
	logger *slog.Logger
	lines  chan hostLine

	wmu sync.Mutex // one message written at a time

	closeOnce sync.Once
	closed    chan struct{}
}

// read frames Reader's lines until it ends, answering those that do not
// decode.
func (c *hostConn) read() {
	br := bufio.NewReader(c.r)
	for {
		line, long, err := readLine(br, MaxHostLine)
		if len(bytes.TrimSpace(line)) > 0 || long {
			if msg, ok := c.decode(line, long); ok {
				select {
				case c.lines <- hostLine{msg: msg}:
				case <-c.closed:
					return
				}
			}
		}
		if err != nil {
			select {
			case c.lines <- hostLine{err: err}:
			case <-c.closed:
			}
			return
		}
	}
}

// readLine returns the next line of br without its newline, at most max
// bytes of it (long reports that more were skipped), and io.EOF (or the
// read error) after the last.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long {
			if len(line)+len(frag) > max+1 {
				long, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), long, err
	}
}

// decode returns the message of line, or answers the host with the
// error of a line that is none.
func (c *hostConn) decode(line []byte, long bool) (jsonrpc.Message, bool) {
	if !long {
		msg, err := jsonrpc.DecodeMessage(line)
		if err == nil {
			return msg, true
		}
	}
	werr := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: not a JSON-RPC 2.0 request, notification or response"}
	switch {
	case long:
		werr = &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: fmt.Sprintf("parse error: a message longer than %d bytes", MaxHostLine)}
	case !json.Valid(line):
		werr = &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "parse error: the line is not JSON"}
	}
	var withID struct {
		ID any `json:"id"`
	}
	var id jsonrpc.ID
	if !long && json.Unmarshal(line, &withID) == nil {
		id, _ = jsonrpc.MakeID(withID.ID) // an invalid id answers with id null
	}
	c.logger.Warn("connect: a line from the host is not a JSON-RPC message; answered with an error", "code", werr.Code, "bytes", len(line))
	if err := c.writeError(id, werr); err != nil {
		c.logger.Debug("connect: message not delivered to the host", "error", err)
	}
	return nil, false
}

// writeError answers id (invalid: null) with werr. The SDK's encoder
// leaves out an invalid id, and an error answer to a line whose id is
// unknown carries "id": null (JSON-RPC 2.0, section 5).
func (c *hostConn) writeError(id jsonrpc.ID, werr *jsonrpc.Error) error {
	if id.IsValid() {
		return c.Write(context.Background(), &jsonrpc.Response{ID: id, Error: werr})
	}
	data, err := json.Marshal(struct {
		Version string         `json:"jsonrpc"`
		ID      *int           `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", nil, werr})
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

func (c *hostConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	select {
	case l := <-c.lines:
		return l.msg, l.err
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-c.closed:
		return nil, io.EOF
	}
}

func (c *hostConn) Write(_ context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

func (c *hostConn) writeLine(data []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	select {
	case <-c.closed:
		return errors.New("connect: the host's connection is closed")
	default:
	}
	_, err := c.w.Write(append(data, '\n'))
	return err
}

// Close closes Reader and Writer, which ends the reading.
func (c *hostConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.closed)
		err = errors.Join(c.r.Close(), c.w.Close())
	})
	return err
}

func (c *hostConn) SessionID() string { return "" }
