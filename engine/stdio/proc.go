package stdio

// This file holds proc, one subprocess serving one generation of one
// session: its state, and how it starts.

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/tidemark-mcp/tidemark/engine"
	"github.com/tidemark-mcp/tidemark/engine/routing"
	"github.com/tidemark-mcp/tidemark/internal/redact"
	"github.com/tidemark-mcp/tidemark/replay"
)

// proc is one subprocess: one generation of one session.
type proc struct {
	e      *Engine
	token  string
	gen    uint64
	logger *slog.Logger
	out    engine.Outbox

	cmd     *exec.Cmd
	pid     int // also the process group ID (Setpgid)
	started time.Time
	stdin   *os.File
	stdout  *os.File
	stderr  *os.File
	lines   chan []byte  // newline-terminated messages for stdin
	invalid *lineLimiter // logging of stdout lines that are not JSON-RPC, dropped
	stderrs *lineLimiter // logging of stderr lines

	ctx      context.Context // of the reader's Sends; cancelled by Close
	cancel   context.CancelFunc
	stopOnce sync.Once
	stopping chan struct{} // closed by Close
	done     chan struct{} // closed once the subprocess is reaped and its calls failed

	mu          sync.Mutex
	ended       bool                                  // deliveries refused: the subprocess is ending
	quietReason replay.Reason                         // why the end fails no call in flight; "" if it must
	failReason  replay.Reason                         // error.data.reason of the calls the end fails; "": replay.ReasonServerExited
	routes      *routing.Router                       // relates messages to the client calls in flight
	endAnswers  bool                                  // the end took the calls in flight from routes and answers them
	internal    map[jsonrpc.ID]chan *jsonrpc.Response // the engine's own calls (restore)
	initialize  jsonrpc.ID                            // the client's initialize call while unanswered
	initTimer   *time.Timer                           // ends the subprocess if initialize stays unanswered
	cancelled   map[jsonrpc.ID]*time.Timer            // calls the client cancelled, unanswered: each timer ends its grace
	abandoned   abandonedCalls                        // subprocess IDs of calls answered as cancelled: a late answer is dropped
	aliases     map[jsonrpc.ID]jsonrpc.ID             // client call in flight → the engine's ID the subprocess knows it by
	unalias     map[jsonrpc.ID]jsonrpc.ID             // the inverse of aliases
	nextAlias   uint64                                // last n used in an alias
	status      string                                // how the subprocess exited; set before done closes
}

var _ engine.Session = (*proc)(nil)

// pipes are the ends of a subprocess's stdin, stdout and stderr that
// Tidemark keeps.
type pipes struct {
	stdin          *os.File // written by Tidemark
	stdout, stderr *os.File // read by Tidemark
}

// startProcess starts the command of e as the leader of a new process
// group, with pipes for its stdin, stdout and stderr.
func (e *Engine) startProcess() (*exec.Cmd, pipes, error) {
	var files []*os.File // every pipe end, closed on failure
	fail := func(err error) (*exec.Cmd, pipes, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, pipes{}, err
	}
	var ends [3][2]*os.File // stdin, stdout, stderr: read end, write end
	for i := range ends {
		r, w, err := os.Pipe()
		if err != nil {
			return fail(err)
		}
		files = append(files, r, w)
		ends[i] = [2]*os.File{r, w}
	}
	cmd := &exec.Cmd{
		Path:   e.path,
		Args:   append([]string{e.opts.Command}, e.opts.Args...),
		Env:    e.env,
		Dir:    e.opts.Dir,
		Stdin:  ends[0][0],
		Stdout: ends[1][1],
		Stderr: ends[2][1],
		// Its own process group, so that ending the session ends every
		// process the server started too. Pdeathsig: the kernel kills it
		// when Tidemark dies without ending it (kill -9, a crash, the OOM
		// killer), since a server that ignores the end of its stdin would
		// otherwise run on under PID 1, unknown to the next process. It
		// follows the thread that started the subprocess, which Go ends
		// only when a goroutine locked to it exits still locked; Tidemark
		// leaves none locked. The processes the server started get no
		// signal: the end of the stdin they share with it is theirs to
		// heed.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	if err := cmd.Start(); err != nil {
		return fail(fmt.Errorf("start %s: %w", e.opts.Command, err))
	}
	e.opts.Metrics.ProcessStarted()
	// The child holds its ends now.
	ends[0][0].Close()
	ends[1][1].Close()
	ends[2][1].Close()
	return cmd, pipes{stdin: ends[0][1], stdout: ends[1][0], stderr: ends[2][0]}, nil
}

// spawn starts the subprocess of one session generation and its reader,
// writer and supervisor goroutines.
func (e *Engine) spawn(info engine.Info, out engine.Outbox) (*proc, error) {
	logger := info.Logger
	if logger == nil {
		logger = e.opts.Logger.With("session", redact.Token(info.Token), "generation", info.Generation)
	}
	started := time.Now()
	cmd, p, err := e.startProcess()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &proc{
		e: e, token: info.Token, gen: info.Generation, logger: logger, out: out,
		cmd: cmd, pid: cmd.Process.Pid, started: started,
		stdin: p.stdin, stdout: p.stdout, stderr: p.stderr,
		lines:     make(chan []byte, 64),
		invalid:   newInvalidLimiter(logger, e.summaryEvery),
		stderrs:   newStderrLimiter(logger),
		ctx:       ctx,
		cancel:    cancel,
		stopping:  make(chan struct{}),
		done:      make(chan struct{}),
		routes:    routing.New(info.Generation),
		internal:  make(map[jsonrpc.ID]chan *jsonrpc.Response),
		cancelled: make(map[jsonrpc.ID]*time.Timer),
		aliases:   make(map[jsonrpc.ID]jsonrpc.ID),
		unalias:   make(map[jsonrpc.ID]jsonrpc.ID),
	}
	e.mu.Lock()
	e.sessions[s] = struct{}{}
	closed := e.closed
	e.mu.Unlock()
	logger.Info("subprocess started", "pid", s.pid, "command", e.opts.Command)

	readDone, errDone := make(chan struct{}), make(chan struct{})
	go s.readLoop(readDone)
	go s.stderrLoop(errDone)
	go s.writeLoop()
	go s.supervise(readDone, errDone)
	if closed {
		// Engine.Close ran while this subprocess started and did not see it.
		s.Close()
		return nil, ErrClosed
	}
	return s, nil
}

// Done implements engine.Session.
func (s *proc) Done() <-chan struct{} { return s.done }

func (s *proc) closedErr() error {
	return fmt.Errorf("stdio: session %s gen %d: subprocess %d ending: %w", redact.Token(s.token), s.gen, s.pid, engine.ErrClosed)
}
