package testenv

import (
	"context"
	"testing"
	"time"
)

// TestLateRelease: End makes the context done at once (Done closed, Err
// context.Canceled) while a function context.AfterFunc registered, and
// the cancellation of a context derived with context.WithCancel, wait for
// Release; a function stopped before then never runs.
func TestLateRelease(t *testing.T) {
	c := NewLateRelease(context.Background())
	ran := make(chan struct{})
	context.AfterFunc(c, func() { close(ran) })
	stopped := make(chan struct{})
	stop := context.AfterFunc(c, func() { close(stopped) })
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()

	c.End()
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after End")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err after End = %v, want context.Canceled", c.Err())
	}
	if !stop() {
		t.Fatal("stop after End, before Release = false, want true")
	}
	time.Sleep(20 * time.Millisecond)
	select {
	case <-ran:
		t.Fatal("AfterFunc's function ran before Release")
	default:
	}
	if child.Err() != nil {
		t.Fatalf("derived context's Err before Release = %v, want nil", child.Err())
	}

	c.Release()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc's function did not run within 10 s of Release")
	}
	select {
	case <-child.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("derived context not cancelled within 10 s of Release")
	}
	select {
	case <-stopped:
		t.Fatal("a stopped function ran")
	case <-time.After(20 * time.Millisecond):
	}
}

// TestLateReleaseEndsWithParent: a LateRelease ends when its parent does.
func TestLateReleaseEndsWithParent(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	c := NewLateRelease(parent)
	cancel()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not done within 10 s of its parent's end")
	}
	if c.Err() != context.Canceled {
		t.Fatalf("Err = %v, want context.Canceled", c.Err())
	}
}
