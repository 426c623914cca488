// host.go holds the bridge's stdio connection toward the host: newline
// framed JSON-RPC (MCP 2025-11-25, "Transports", stdio) that answers a
// line it cannot decode with a JSON-RPC error and reads on, and gives the
// host's calls ids of the bridge's own, each answer going back under the
// host's id as the host wrote it.

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
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tidemark-mcp/tidemark/replay"
)

// MaxHostLine bounds one line (one message) from the host, in bytes,
// without its newline; a longer line is answered with a parse error and
// skipped to its newline, its size logged.
const MaxHostLine = 16 << 20

// HostTransport is the host's end of the bridge: messages one per line
// on Reader (the host's stdout, the bridge's stdin) and Writer (the
// bridge's stdout). Unlike mcp.StdioTransport, whose decoder stops at
// the first frame it cannot decode, a line that is not a JSON-RPC 2.0
// message gets an error answer (JSON-RPC 2.0, section 5.1: -32700 parse
// error when it is not JSON, -32600 invalid request otherwise; id null
// unless the line has a valid id) and the next line is read.
//
// A request id is a string or any JSON number (MCP 2025-11-25, "Base
// Protocol": RequestId), and its answer carries the same value (JSON-RPC
// 2.0, section 5). The go-sdk's decoder makes an int64 of every number
// (2.5 becomes 2, 9007199254740993 becomes 9007199254740992), so the
// connection numbers the host's calls itself: Read gives each call a
// bridge id (1, 2, 3...), unique for the run, and Write answers it under
// the host's id bytes as read. A call whose id is the same string, or a
// number written the same way, as that of a call still in flight is
// refused at once, -32600 with error.data.reason duplicate_request_id,
// and never reaches the bridge: the first runs (JSON-RPC 2.0, section 4:
// an id identifies one request of its sender). A call with "id": null is
// refused -32600 (MCP 2025-11-25: the id must not be null). The host's
// notifications/cancelled names the bridge id of the call it cancels;
// one naming no call in flight is dropped (a cancellation of an unknown
// request is ignored, MCP 2025-11-25, "Cancellation"), and an answer
// that comes after the host cancelled its call is dropped too.
//
// A line that is a JSON array is a batch (JSON-RPC 2.0, section 6), which
// a receiver of MCP 2025-03-26 must accept: its messages are read in
// order, and its answer is one array written once its last call is
// answered or cancelled. After a host's initialize that asks for
// 2025-06-18 or later, which have no batches, a batch is refused whole.
type HostTransport struct {
	Reader io.ReadCloser
	Writer io.WriteCloser
	// Logger receives one line per refused line. Nil: slog.Default().
	Logger *slog.Logger
}

// Connect implements mcp.Transport; it starts reading Reader.
func (t *HostTransport) Connect(context.Context) (mcp.Connection, error) {
	c := &hostConn{r: t.Reader, w: t.Writer, logger: t.Logger, lines: make(chan hostLine), closed: make(chan struct{}),
		byHost: make(map[string]int64), byBridge: make(map[int64]json.RawMessage), inBatch: make(map[int64]batchSlot)}
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

	idmu sync.Mutex
	// last is the bridge id given last.
	last int64
	// byHost holds the bridge id of each host call in flight, by its
	// hostKey; byBridge the host's id bytes, by bridge id.
	byHost   map[string]int64
	byBridge map[int64]json.RawMessage
	// inBatch holds the batch, and the place in its answer, of each call
	// in flight that came in one.
	inBatch map[int64]batchSlot
	// version is the protocol revision of the host's first initialize.
	version string

	closeOnce sync.Once
	closed    chan struct{}
}

// read frames Reader's lines until it ends, answering those that do not
// decode.
func (c *hostConn) read() {
	br := bufio.NewReader(c.r)
	for {
		line, size, err := readLine(br, MaxHostLine)
		if len(bytes.TrimSpace(line)) > 0 || size > MaxHostLine {
			for _, msg := range c.decode(line, size) {
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

// readLine returns the next line of br without its newline when it is at
// most max bytes long (nil otherwise), its size in bytes without its
// newline, and io.EOF (or the read error) after the last line, which may
// end without a newline. A longer line is read to its newline and its
// bytes dropped, so that none of them is taken for a message, and its size
// is counted whole.
func readLine(br *bufio.Reader, max int) (line []byte, size int, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		frag = bytes.TrimSuffix(frag, []byte("\n"))
		size += len(frag)
		if size <= max {
			line = append(line, frag...)
		} else {
			line = nil
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, size, err
	}
}

// decode returns the messages of line, one message or a batch of them,
// after answering the host with the error of a line, or of a message of a
// batch, that is none. size is the line's size in bytes; over MaxHostLine,
// line is nil and gets a parse error.
func (c *hostConn) decode(line []byte, size int) []jsonrpc.Message {
	if size > MaxHostLine {
		c.logger.Warn("connect: a line from the host is longer than tidemark connect reads; answered with an error and skipped to its end: the host must send smaller messages",
			"code", jsonrpc.CodeParseError, "bytes", size, "limit", MaxHostLine)
		c.refuse(nil, &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: fmt.Sprintf("parse error: a message longer than %d bytes", MaxHostLine)})
		return nil
	}
	if bytes.HasPrefix(bytes.TrimSpace(line), []byte("[")) && json.Valid(line) {
		return c.batch(line)
	}
	msg, id, werr := c.message(line)
	if werr != nil {
		c.refuse(id, werr)
		return nil
	}
	if msg == nil {
		return nil
	}
	return []jsonrpc.Message{msg}
}

// message returns the message of data, or the error answer it gets,
// under its id as written (nil: null), or neither (a notification
// dropped).
func (c *hostConn) message(data []byte) (jsonrpc.Message, json.RawMessage, *jsonrpc.Error) {
	msg, err := jsonrpc.DecodeMessage(data)
	if err == nil {
		return c.fromHost(data, msg)
	}
	werr := &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: not a JSON-RPC 2.0 request, notification or response"}
	if !json.Valid(data) {
		werr = &jsonrpc.Error{Code: jsonrpc.CodeParseError, Message: "parse error: the line is not JSON"}
	}
	id := rawID(data) // an invalid id answers with id null
	c.logger.Warn("connect: a line from the host is not a JSON-RPC message; answered with an error", "code", werr.Code, "bytes", len(data))
	return nil, id, werr
}

// hostBatch is a JSON-RPC batch of the host's (JSON-RPC 2.0, section 6)
// whose calls are in flight: its answer, one JSON array, is written once
// the last is answered or cancelled.
type hostBatch struct {
	// answers has a place for each call of the batch and each message of
	// it that is none, in the order of the batch's messages, so that the
	// answer lists them in that order whatever order the calls end in
	// (JSON-RPC 2.0, section 6, allows any; docs/connect.md promises this
	// one). A call not yet answered, or cancelled, has nil.
	answers [][]byte
	pending int // calls not yet answered nor cancelled
}

// batchSlot is the place of a call's answer in its batch's answer.
type batchSlot struct {
	b *hostBatch
	i int // index in b.answers
}

// batch returns the messages of the batch line, in order, each call with
// a bridge id of its batch; a message that is none gets its error answer
// in the batch's answer. A batch under a protocol revision that has none
// (2025-06-18 and later, which the host's initialize asked for), and an
// empty batch, get one error answer.
func (c *hostConn) batch(line []byte) []jsonrpc.Message {
	var elems []json.RawMessage
	if err := json.Unmarshal(line, &elems); err != nil || len(elems) == 0 {
		c.logger.Warn("connect: an empty batch from the host; answered with an error")
		c.refuse(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: an empty batch (JSON-RPC 2.0, section 6)"})
		return nil
	}
	c.idmu.Lock()
	version := c.version
	c.idmu.Unlock()
	if version >= batchlessVersion {
		c.logger.Warn("connect: a batch from the host under a protocol revision without batches; answered with an error", "protocol", version, "messages", len(elems))
		c.refuse(nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: protocol " + version + " has no JSON-RPC batches (MCP 2025-06-18 removed them): write each message on a line of its own"})
		return nil
	}
	b := &hostBatch{}
	var msgs []jsonrpc.Message
	for _, e := range elems {
		msg, id, werr := c.message(e)
		if werr != nil {
			if a, err := encodeAnswer(id, nil, werr); err == nil {
				c.idmu.Lock()
				b.answers = append(b.answers, a)
				c.idmu.Unlock()
			}
			continue
		}
		if msg == nil {
			continue
		}
		if r, ok := msg.(*jsonrpc.Request); ok && r.IsCall() {
			bid, _ := r.ID.Raw().(int64)
			c.idmu.Lock()
			c.inBatch[bid] = batchSlot{b: b, i: len(b.answers)}
			b.answers = append(b.answers, nil)
			b.pending++
			c.idmu.Unlock()
		}
		msgs = append(msgs, msg)
	}
	c.idmu.Lock()
	c.writeBatch(b)
	c.idmu.Unlock()
	return msgs
}

// batchlessVersion is the first protocol revision without JSON-RPC
// batches (MCP 2025-06-18, "Changelog").
const batchlessVersion = "2025-06-18"

// writeBatch writes b's answer once none of its calls is pending, if it
// has one (a batch of notifications and answers gets none, JSON-RPC 2.0,
// section 6). c.idmu is held.
func (c *hostConn) writeBatch(b *hostBatch) {
	if b.pending > 0 {
		return
	}
	var answers [][]byte
	for _, a := range b.answers {
		if a != nil {
			answers = append(answers, a)
		}
	}
	b.answers = nil
	if len(answers) == 0 {
		return
	}
	data := append([]byte("["), bytes.Join(answers, []byte(","))...)
	if err := c.writeLine(append(data, ']')); err != nil {
		c.logger.Debug("connect: message not delivered to the host", "error", err)
	}
}

// fromHost gives the host's call msg, read from line, a bridge id, or
// refuses it; it gives the host's notifications/cancelled the bridge id
// of the call it names, or drops it.
func (c *hostConn) fromHost(line []byte, msg jsonrpc.Message) (jsonrpc.Message, json.RawMessage, *jsonrpc.Error) {
	req, ok := msg.(*jsonrpc.Request)
	if !ok {
		if !isResponse(line) {
			// The SDK's decoder takes any object without a method for a
			// response; sent on, it would answer nothing of the server's.
			c.logger.Warn("connect: a line from the host is not a JSON-RPC message; answered with an error", "code", jsonrpc.CodeInvalidRequest, "bytes", len(line))
			return nil, rawID(line), &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: not a JSON-RPC 2.0 request, notification or response"}
		}
		return msg, nil, nil
	}
	if !req.IsCall() {
		if req.Method == "notifications/cancelled" {
			return c.cancelled(req), nil, nil
		}
		if id := rawID(line); id == nil && hasID(line) {
			c.logger.Warn("connect: a call from the host with id null; answered with an error", "method", req.Method)
			return nil, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "invalid request: the id of a request must be a string or a number, not null (MCP 2025-11-25, \"Base Protocol\")"}
		}
		return msg, nil, nil
	}
	id := rawID(line)
	key := hostKey(id)
	c.idmu.Lock()
	if _, dup := c.byHost[key]; dup {
		c.idmu.Unlock()
		c.logger.Warn("connect: a call from the host reuses the id of a call in flight; answered with an error", "method", req.Method, "host_id", string(id), "reason", replay.ReasonDuplicateRequestID)
		data, _ := json.Marshal(map[string]string{"reason": replay.ReasonDuplicateRequestID.String()}) // a string always encodes
		return nil, id, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Data: data,
			Message: "invalid request: a call with id " + string(id) + " is in flight, and this one was not sent; ids are unique per sender (JSON-RPC 2.0, section 4): send it again with another id, or once the first is answered"}
	}
	c.last++
	bid := c.last
	c.byHost[key] = bid
	c.byBridge[bid] = id
	if req.Method == "initialize" && c.version == "" {
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(req.Params, &p) // bad params: the server answers them
		c.version = p.ProtocolVersion
	}
	c.idmu.Unlock()
	req.ID = bridgeID(bid)
	return req, nil, nil
}

// cancelled returns the host's notifications/cancelled req naming the
// bridge id of the call it cancels, which is forgotten: its id is free
// again, and an answer that still comes is dropped. A cancellation that
// names no call in flight is dropped (false).
func (c *hostConn) cancelled(req *jsonrpc.Request) jsonrpc.Message {
	var params map[string]json.RawMessage
	if json.Unmarshal(req.Params, &params) != nil || params["requestId"] == nil {
		c.logger.Debug("connect: notifications/cancelled without a requestId; dropped")
		return nil
	}
	key := hostKey(params["requestId"])
	c.idmu.Lock()
	bid, ok := c.byHost[key]
	if ok {
		delete(c.byHost, key)
		delete(c.byBridge, bid)
		if slot, ok := c.inBatch[bid]; ok {
			delete(c.inBatch, bid)
			slot.b.pending--
			c.writeBatch(slot.b)
		}
	}
	c.idmu.Unlock()
	if !ok {
		c.logger.Debug("connect: notifications/cancelled names no call in flight; dropped", "host_id", string(params["requestId"]))
		return nil
	}
	params["requestId"] = json.RawMessage(strconv.FormatInt(bid, 10))
	raw, err := json.Marshal(params)
	if err != nil {
		return nil
	}
	return &jsonrpc.Request{Method: req.Method, Params: raw}
}

// hostID returns the id of the call of bridge id id in flight, as the
// host wrote it; false when no such call is in flight.
func (c *hostConn) hostID(id jsonrpc.ID) (json.RawMessage, bool) {
	bid, _ := id.Raw().(int64)
	c.idmu.Lock()
	defer c.idmu.Unlock()
	raw, ok := c.byBridge[bid]
	return raw, ok
}

// callID is the log field of the host's call id: host_id, the id as the
// host wrote it. The bridge's stdio connection (HostTransport) gives the
// calls ids of its own and knows the host's while the call is in flight;
// once the host cancelled the call it is forgotten, and the field is
// bridge_id, the bridge's number. Toward another connection the id is
// the host's as received.
func callID(host mcp.Connection, id jsonrpc.ID) slog.Attr {
	c, ok := host.(*hostConn)
	if !ok {
		return slog.Any("host_id", id.Raw())
	}
	if raw, ok := c.hostID(id); ok {
		return slog.String("host_id", string(raw))
	}
	return slog.Any("bridge_id", id.Raw())
}

// bridgeID is the jsonrpc.ID of bridge id n.
func bridgeID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(n)) // exact below 2^53
	return id
}

// rawID returns the id of the message line as written, when it is a
// string or a number; otherwise (absent, null, another JSON value, or a
// line that is not a JSON object) nil.
func rawID(line []byte) json.RawMessage {
	var m struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(line, &m) != nil || len(m.ID) == 0 {
		return nil
	}
	switch b := m.ID[0]; {
	case b == '"', b == '-', b >= '0' && b <= '9':
		return m.ID
	}
	return nil
}

// isResponse reports whether the message line, which has no method, is a
// response: it has exactly one of result and error (JSON-RPC 2.0, section
// 5).
func isResponse(line []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	_, result := m["result"]
	_, failed := m["error"]
	return result != failed
}

// hasID reports whether the message line has an "id" member, null or not.
func hasID(line []byte) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return false
	}
	_, ok := m["id"]
	return ok
}

// hostKey is the identity of the host's id bytes id: a string by its
// value (so "a" and "\u0061" are one id), a number as written (so 1000
// and 1e3 are two).
func hostKey(id json.RawMessage) string {
	var s string
	if len(id) > 0 && id[0] == '"' && json.Unmarshal(id, &s) == nil {
		return "s" + s
	}
	return "n" + string(id)
}

// refuse answers the host's line whose id is id (nil: null) with werr.
func (c *hostConn) refuse(id json.RawMessage, werr *jsonrpc.Error) {
	if err := c.writeAnswer(id, nil, werr); err != nil {
		c.logger.Debug("connect: message not delivered to the host", "error", err)
	}
}

// writeAnswer writes the answer under the host's id bytes id (nil: null)
// of result, or of werr when it is not nil (encodeAnswer).
func (c *hostConn) writeAnswer(id, result json.RawMessage, werr *jsonrpc.Error) error {
	data, err := encodeAnswer(id, result, werr)
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

// encodeAnswer returns the answer under the host's id bytes id (nil:
// null, JSON-RPC 2.0, section 5: the id of a request that could not be
// read) of result, or of werr when it is not nil. The SDK's encoder knows
// no id but its own, so the answer is framed here.
func encodeAnswer(id, result json.RawMessage, werr *jsonrpc.Error) ([]byte, error) {
	if id == nil {
		id = json.RawMessage("null")
	}
	answer := struct {
		Version string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result,omitempty"`
		Error   *jsonrpc.Error  `json:"error,omitempty"`
	}{Version: "2.0", ID: id, Result: result, Error: werr}
	if werr == nil && result == nil {
		answer.Result = json.RawMessage("{}")
	}
	return json.Marshal(answer)
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

// Write writes msg to the host. An answer to a host's call goes under the
// host's id; one to a call the host cancelled, or already answered, is
// dropped.
func (c *hostConn) Write(_ context.Context, msg jsonrpc.Message) error {
	if r, ok := msg.(*jsonrpc.Response); ok {
		return c.answer(r)
	}
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(data)
}

// answer writes r, an answer to the call of bridge id r.ID, under the
// host's id of that call, which is then free again.
func (c *hostConn) answer(r *jsonrpc.Response) error {
	bid, _ := r.ID.Raw().(int64)
	c.idmu.Lock()
	id, ok := c.byBridge[bid]
	slot, inBatch := c.inBatch[bid]
	if ok {
		delete(c.byBridge, bid)
		delete(c.byHost, hostKey(id))
		delete(c.inBatch, bid)
	}
	c.idmu.Unlock()
	if !ok {
		c.logger.Debug("connect: an answer to a call the host cancelled or has had answered; dropped", "id", r.ID.Raw())
		return nil
	}
	if ok && inBatch {
		return c.batchAnswer(slot, id, r)
	}
	werr, isWire := r.Error.(*jsonrpc.Error)
	if r.Error == nil || isWire {
		return c.writeAnswer(id, r.Result, werr)
	}
	// The SDK's encoding of an answer gives a Go error as a JSON-RPC
	// error object.
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: r.ID, Result: r.Result, Error: r.Error})
	if err != nil {
		return err
	}
	var wire struct {
		Result json.RawMessage `json:"result"`
		Error  *jsonrpc.Error  `json:"error"`
	}
	if err := json.Unmarshal(data, &wire); err != nil {
		return err
	}
	return c.writeAnswer(id, wire.Result, wire.Error)
}

// batchAnswer puts r, the answer to the call of the batch's place slot
// whose host id is id, in the batch's answer, and writes that once it is
// whole.
func (c *hostConn) batchAnswer(slot batchSlot, id json.RawMessage, r *jsonrpc.Response) error {
	b := slot.b
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: r.ID, Result: r.Result, Error: r.Error})
	if err == nil {
		var wire struct {
			Result json.RawMessage `json:"result"`
			Error  *jsonrpc.Error  `json:"error"`
		}
		if err = json.Unmarshal(data, &wire); err == nil {
			data, err = encodeAnswer(id, wire.Result, wire.Error)
		}
	}
	c.idmu.Lock()
	defer c.idmu.Unlock()
	if err == nil {
		b.answers[slot.i] = data
	}
	b.pending--
	c.writeBatch(b)
	return err
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
