package redis

// lag.go holds the rule by which Check counts a primary's replica as one
// that writes can reach: INFO replication lists it online, and its lag
// is within lagBound. A replica that is stopped or hung keeps its
// connection, and its place in ROLE and INFO replication as online,
// until the primary's repl-timeout (60 s by default) drops it, while
// every write that waits for it fails; only its lag tells.

import (
	"strconv"
	"strings"
	"time"
)

// replicaAck is one replica as its primary's INFO replication lists it,
// in a field slaveN:ip=…,port=…,state=…,offset=…,lag=….
type replicaAck struct {
	addr  string // ip:port
	state string // online once the initial sync is done; wait_bgsave, send_bulk, … before
	// lag is the number of whole seconds of the primary's clock since
	// the replica's last REPLCONF ACK (it sends one every second, and at
	// once when a WAIT asks); -1 when INFO does not give it.
	lag int
}

// replicasOf returns the replicas an INFO replication reply lists, in
// its order (slave0, slave1, …).
func replicasOf(info string) []replicaAck {
	var out []replicaAck
	for i := 0; ; i++ {
		v := infoField(info, "slave"+strconv.Itoa(i))
		if v == "" {
			return out
		}
		r := replicaAck{lag: -1}
		var ip, port string
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = val
			case "port":
				port = val
			case "state":
				r.state = val
			case "lag":
				if n, err := strconv.Atoi(val); err == nil && n >= 0 {
					r.lag = n
				}
			}
		}
		r.addr = ip + ":" + port
		out = append(out, r)
	}
}

// lagBound returns the largest lag, in whole seconds, at which a replica
// counts as reaching writes that wait up to timeout for it (Options.
// ReplicationTimeout): one second for the replica's ack period, plus the
// timeout rounded up to whole seconds, 2 s for the default of 1 s. A
// replica that acks every second reads 0 or 1, and 2 with an ack a
// little late (lag counts whole seconds of the primary's clock), so a
// healthy one stays within it. A lag over it means more than timeout +
// 1 s without an ack: the replica missed its own ack and let a whole
// write's wait go by unanswered, as a stopped one does (its lag grows by
// one every second).
func lagBound(timeout time.Duration) int {
	return 1 + int((timeout+time.Second-1)/time.Second)
}

// reaches reports whether writes can reach r: it is online and its lag is
// at most bound (lagBound). A lag INFO does not give counts as within
// the bound, since nothing says otherwise.
func (r replicaAck) reaches(bound int) bool {
	return r.state == "online" && r.lag <= bound
}

// whyNot says why writes cannot reach r, for Check's error: its lag over
// the bound, or its state when it is not online.
func (r replicaAck) whyNot() string {
	if r.state != "online" {
		return r.addr + ": state " + r.state
	}
	return r.addr + ": lag " + strconv.Itoa(r.lag) + "s"
}
