// Package crashtest holds the crash-consistency test of the durable store
// (store/durable) through the real `tidemark serve --data-dir` binary:
// kill -9 at random moments while 8 sessions append, then the data
// directory is reopened and checked. It has no code of its own.
package crashtest
