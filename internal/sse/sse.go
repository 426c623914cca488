// Package sse reads Server-Sent Events streams as the WHATWG HTML standard
// defines their interpretation ("Server-sent events", event stream
// interpretation): fields id, event, data and retry, comments ignored,
// one event per blank line. Tidemark's client, probe and tests read
// servers' streams with it.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// DefaultMaxEventSize is the default bound, in bytes, on one event's lines.
const DefaultMaxEventSize = 16 << 20

// readBufferSize is the read buffer of a Reader, in bytes: every open
// stream holds one (a gateway holds one per call in flight and per
// session), and a line longer than it is collected whole all the same.
const readBufferSize = 4 << 10

// ErrEventTooLarge is returned when an event's lines exceed the bound.
var ErrEventTooLarge = errors.New("sse: event too large")

// Event is one dispatched event.
type Event struct {
	// ID is the value of the event's last id field; HasID reports whether
	// the event had one (an id field with an empty value resets the last
	// event ID, per the standard).
	ID    string
	HasID bool
	// Name is the event field ("" means "message").
	Name string
	// Data is the data lines joined by "\n"; empty for a priming event.
	Data []byte
	// Retry is the reconnection time of a valid retry field; zero if none.
	Retry time.Duration
}

// Reader reads events from an SSE stream.
type Reader struct {
	r   *bufio.Reader
	max int
	// OnComment, when set, is called for each comment line read (a line
	// starting with ':'), which servers send to keep an idle stream alive.
	OnComment func()
}

// NewReader returns a Reader of r whose events may be at most maxEventSize
// bytes (0: DefaultMaxEventSize).
func NewReader(r io.Reader, maxEventSize int) *Reader {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	return &Reader{r: bufio.NewReaderSize(r, readBufferSize), max: maxEventSize}
}

// Next returns the next event that has at least one field set (an id, data,
// an event name or a retry). A block of only comments is skipped. At the
// end of the stream it returns io.EOF; an event cut off by the end of the
// stream is discarded, as the standard says, and io.ErrUnexpectedEOF is
// returned instead of io.EOF so callers can tell a clean end from a cut.
func (rd *Reader) Next() (Event, error) {
	var ev Event
	var data bytes.Buffer
	fields, size := 0, 0
	for {
		line, err := rd.r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long line: collect it whole, within the bound.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				if len(buf) > rd.max {
					return Event{}, ErrEventTooLarge
				}
				line, err = rd.r.ReadSlice('\n')
				buf = append(buf, line...)
			}
			line = buf
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if fields > 0 || len(line) > 0 {
					return Event{}, io.ErrUnexpectedEOF
				}
				return Event{}, io.EOF
			}
			return Event{}, err
		}
		size += len(line)
		if size > rd.max {
			return Event{}, ErrEventTooLarge
		}
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(line) == 0 {
			if fields == 0 {
				size = 0
				continue
			}
			ev.Data = bytes.TrimSuffix(data.Bytes(), []byte{'\n'})
			return ev, nil
		}
		if line[0] == ':' {
			if rd.OnComment != nil {
				rd.OnComment()
			}
			continue // comment
		}
		name, value, _ := bytes.Cut(line, []byte{':'})
		value = bytes.TrimPrefix(value, []byte{' '})
		switch string(name) {
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				ev.ID, ev.HasID = string(value), true
				fields++
			}
		case "event":
			ev.Name = string(value)
			fields++
		case "data":
			data.Write(value)
			data.WriteByte('\n')
			fields++
		case "retry":
			if ms, err := strconv.ParseUint(string(value), 10, 32); err == nil {
				ev.Retry = time.Duration(ms) * time.Millisecond
				fields++
			}
		}
	}
}

// String renders e for test failure messages.
func (e Event) String() string {
	return fmt.Sprintf("{id=%q retry=%v event=%q data=%q}", e.ID, e.Retry, e.Name, e.Data)
}
