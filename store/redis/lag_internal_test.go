package redis

import (
	"reflect"
	"testing"
	"time"
)

// TestReplicasOf: the replicas of an INFO replication reply as Redis 7
// writes it (CRLF lines, a replica syncing, one online, one stopped),
// each with its address, state and lag; a reply without replicas, or
// with a lag missing, gives none and -1.
func TestReplicasOf(t *testing.T) {
	info := "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n" +
		"slave0:ip=127.0.0.1,port=6380,state=online,offset=5282,lag=0\r\n" +
		"slave1:ip=10.0.0.7,port=6381,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave2:ip=127.0.0.1,port=6382,state=online,offset=14,lag=10\r\n" +
		"master_failover_state:no-failover\r\nmaster_repl_offset:5282\r\n"
	want := []replicaAck{
		{addr: "127.0.0.1:6380", state: "online", lag: 0},
		{addr: "10.0.0.7:6381", state: "wait_bgsave", lag: 0},
		{addr: "127.0.0.1:6382", state: "online", lag: 10},
	}
	if got := replicasOf(info); !reflect.DeepEqual(got, want) {
		t.Errorf("replicasOf = %+v, want %+v", got, want)
	}
	if got := replicasOf("# Replication\r\nrole:master\r\nconnected_slaves:0\r\n"); got != nil {
		t.Errorf("replicasOf without replicas = %+v, want none", got)
	}
	got := replicasOf("role:master\r\nslave0:ip=127.0.0.1,port=6380,state=online,offset=1\r\n")
	if want := []replicaAck{{addr: "127.0.0.1:6380", state: "online", lag: -1}}; !reflect.DeepEqual(got, want) {
		t.Errorf("replicasOf without a lag = %+v, want %+v", got, want)
	}
}

// TestLagBound: the bound is one ack period plus the replication
// timeout in whole seconds, rounded up; 2 s for the default timeout.
func TestLagBound(t *testing.T) {
	for _, c := range []struct {
		timeout time.Duration
		want    int
	}{
		{200 * time.Millisecond, 2},
		{DefaultReplicationTimeout, 2},
		{1001 * time.Millisecond, 3},
		{2 * time.Second, 3},
		{10 * time.Second, 11},
	} {
		if got := lagBound(c.timeout); got != c.want {
			t.Errorf("lagBound(%v) = %d, want %d", c.timeout, got, c.want)
		}
	}
}

// TestReaches: writes reach a replica online with a lag up to the bound
// (or none given); not one over it, nor one not online whatever its lag.
func TestReaches(t *testing.T) {
	for _, c := range []struct {
		r      replicaAck
		want   bool
		whyNot string
	}{
		{replicaAck{"a:1", "online", 0}, true, ""},
		{replicaAck{"a:1", "online", 2}, true, ""},
		{replicaAck{"a:1", "online", -1}, true, ""},
		{replicaAck{"a:1", "online", 3}, false, "a:1: lag 3s"},
		{replicaAck{"a:1", "send_bulk", 0}, false, "a:1: state send_bulk"},
		{replicaAck{"a:1", "wait_bgsave", 0}, false, "a:1: state wait_bgsave"},
	} {
		if got := c.r.reaches(2); got != c.want {
			t.Errorf("%+v reaches(2) = %v, want %v", c.r, got, c.want)
		}
		if !c.want {
			if got := c.r.whyNot(); got != c.whyNot {
				t.Errorf("%+v whyNot = %q, want %q", c.r, got, c.whyNot)
			}
		}
	}
}
