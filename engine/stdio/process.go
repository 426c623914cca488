package stdio

// This file holds the operating-system calls the end of a subprocess
// makes: waiting for its exit without reaping it, signalling its process
// group, draining its pipes.

import (
	"errors"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// drainTimeout bounds how long the end of a subprocess waits for its stdout
// and stderr to reach end of file once its process group is dead; only a
// process that left the group (setsid) can hold them open longer.
const drainTimeout = time.Second

// waitExit blocks until process pid has exited, without reaping it: while
// the zombie exists its process ID, which is also its process group ID,
// cannot be reused, so signalling the group afterwards reaches exactly the
// group's remaining members (waitid(2), WNOWAIT). It returns early if pid
// is reaped by someone else (ECHILD).
func waitExit(pid int) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// signalGroup sends sig to every process of process group pgid. A group
// with no process left is not an error.
func signalGroup(pgid int, sig syscall.Signal) error {
	err := syscall.Kill(-pgid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// drain waits for a pipe reader to finish (done closed) for at most
// drainTimeout, then closes f to unblock it and waits again.
func drain(done <-chan struct{}, f *os.File) {
	t := time.NewTimer(drainTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		f.Close()
		<-done
	}
	f.Close()
}
