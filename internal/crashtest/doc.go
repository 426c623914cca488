// Package crashtest holds the crash-consistency tests of the durable store
// (store/durable) through real processes on a --data-dir: kill -9 of
// `tidemark serve` at random moments while 8 sessions append, then the
// data directory is reopened and checked; and kill -9 of
// examples/everything while tasks work, then tasks/get after each restart
// (the executor rule) and a journal of executions are checked. It has no
// code of its own.
package crashtest
