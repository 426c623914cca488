// initialize.go holds what the transport learns of a session's
// initialize: whether it has been answered, and whether it failed.

package session

// InitializeFailed reports whether the session's initialize was answered
// with an error: the transport ends such a session (store.EndInitializeFailed)
// once the answer is written, so it holds no room and its token answers 404.
func (l *Live) InitializeFailed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.initFailed
}

// InitializeAnswered returns a channel that is closed once the session's
// initialize has been answered, with a result or an error (see
// InitializeFailed); it is closed already if it has been. A transport whose
// client left before the answer waits on it, with Done, to end a session
// whose initialize then fails.
func (l *Live) InitializeAnswered() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.initAnswered {
		c := make(chan struct{}) // asked once per initialize: not worth keeping
		close(c)
		return c
	}
	if l.initWait == nil {
		l.initWait = make(chan struct{})
	}
	return l.initWait
}

// initializeAnsweredLocked records that the session's initialize was
// answered, with an error when failed, and wakes whoever waits on
// InitializeAnswered. l.mu must be held.
func (l *Live) initializeAnsweredLocked(failed bool) {
	l.initFailed = failed
	l.initAnswered = true
	if l.initWait != nil {
		close(l.initWait)
		l.initWait = nil
	}
}
