package check

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// composeFile is the fleet's compose file, from the repository's root.
const composeFile = "deploy/compose/compose.yaml"

// loadCompose loads the compose file as docker compose does (its schema
// checked, anchors merged, ${VARIABLES} interpolated from env).
func loadCompose(t testing.TB, env map[string]string) (*types.Project, error) {
	t.Helper()
	path := filepath.Join(repoRoot(t), composeFile)
	return loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  filepath.Dir(path),
		ConfigFiles: []types.ConfigFile{{Filename: path}},
		Environment: env,
	})
}

// sentinelMonitor reads the sentinel configuration's port and its monitor
// line: the name the sentinels watch, the primary's host and port, and the
// quorum.
func sentinelMonitor(t testing.TB, conf string) (port, name, host, hostPort, quorum string) {
	t.Helper()
	for _, line := range strings.Split(conf, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "port":
			port = f[1]
		case len(f) == 6 && f[0] == "sentinel" && f[1] == "monitor":
			name, host, hostPort, quorum = f[2], f[3], f[4], f[5]
		}
	}
	if port == "" || name == "" {
		t.Fatalf("%s: configs.sentinel has no port or no sentinel monitor line:\n%s", composeFile, conf)
	}
	return port, name, host, hostPort, quorum
}

// TestComposeFleet: deploy/compose is a valid compose file (compose-go's
// loader, schema included) holding a three-replica fleet on Redis
// Sentinel: a Redis primary and a replica of it, both keeping every
// acknowledged write (appendonly, appendfsync always); three sentinels
// watching the primary with a quorum of two; three tidemark replicas built
// from the Dockerfile, each with flags the binary declares, a --redis
// Sentinel URL naming the three sentinels and the watched name, an
// advertised URL the others resolve, the MCP and operator's ports of the
// image, the key ring from one required variable, a health check running
// tidemark ready against /readyz, and a stop grace period above the
// process's own exit_within.
func TestComposeFleet(t *testing.T) {
	bin := imageBinary(t)
	flags := serveFlags(t, bin)
	d := parseDockerfile(t)
	ops := opsPort(t)
	mcpPort := port(t, "serve's default --addr", flags["addr"].def)

	// The key ring is required: without it compose refuses to start.
	_, err := loadCompose(t, map[string]string{})
	if err == nil || !strings.Contains(err.Error(), requeststate.EnvKeys) {
		t.Errorf("%s loaded without $%s: %v; want an error naming the variable", composeFile, requeststate.EnvKeys, err)
	}
	key := testKey()
	p, err := loadCompose(t, map[string]string{requeststate.EnvKeys: key})
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}

	want := []string{"redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3", "tidemark-1", "tidemark-2", "tidemark-3"}
	if got := p.ServiceNames(); !slices.Equal(sorted(got), want) {
		t.Fatalf("%s: services %q; want %q", composeFile, sorted(got), want)
	}

	// Redis: a primary and its replica, both persisting every write.
	conf, ok := p.Configs["sentinel"]
	if !ok {
		t.Fatalf("%s: no configs.sentinel", composeFile)
	}
	sentinelPort, master, primaryHost, primaryPort, quorum := sentinelMonitor(t, conf.Content)
	if primaryHost != "redis-primary" || primaryPort != "6379" || quorum != "2" {
		t.Errorf("%s: the sentinels monitor %s:%s with quorum %s; want redis-primary:6379, quorum 2 of 3", composeFile, primaryHost, primaryPort, quorum)
	}
	for _, name := range []string{"redis-primary", "redis-replica"} {
		cmd := strings.Join(p.Services[name].Command, " ")
		for _, opt := range []string{"redis-server ", " --appendonly yes", " --appendfsync always", " --replica-announce-ip " + name} {
			if !strings.Contains(cmd, opt) {
				t.Errorf("%s: %s runs %q; want %q in it (docs/fleet.md: Redis restarts)", composeFile, name, cmd, strings.TrimSpace(opt))
			}
		}
	}
	if cmd := strings.Join(p.Services["redis-replica"].Command, " "); !strings.HasSuffix(cmd, " --replicaof redis-primary 6379") {
		t.Errorf("%s: redis-replica runs %q; want it --replicaof redis-primary 6379", composeFile, cmd)
	}
	var sentinels []string
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("sentinel-%d", i)
		s := p.Services[name]
		if len(s.Configs) != 1 || s.Configs[0].Source != "sentinel" || !strings.Contains(strings.Join(s.Command, " "), "redis-sentinel") {
			t.Errorf("%s: %s has configs %+v and runs %q; want redis-sentinel on configs.sentinel", composeFile, name, s.Configs, s.Command)
		}
		sentinels = append(sentinels, name+":"+sentinelPort)
	}

	// The tidemark replicas.
	var command []string
	var grace time.Duration
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("tidemark-%d", i)
		s := p.Services[name]
		where := composeFile + " " + name
		if s.Build == nil || s.Build.Context != repoRoot(t) || (s.Build.Dockerfile != "" && s.Build.Dockerfile != "Dockerfile") {
			t.Errorf("%s: build %+v; want the repository's Dockerfile", where, s.Build)
		}
		if s.Build != nil && (s.Build.Args["VERSION"] == nil || *s.Build.Args["VERSION"] == "") {
			t.Errorf("%s: build args %v; want VERSION, which tidemark version prints", where, s.Build.Args)
		}
		if command == nil {
			command = s.Command
		} else if !slices.Equal(command, s.Command) {
			t.Errorf("%s: command %q differs from tidemark-1's %q", where, s.Command, command)
		}
		if len(s.Command) == 0 || s.Command[0] != "serve" {
			t.Fatalf("%s: command %q; want serve first", where, s.Command)
		}
		args := serveArgs(t, where, flags, s.Command[1:])

		u, err := goredis.ParseFailoverURL(args["redis"])
		if err != nil {
			t.Errorf("%s: --redis %q is not a Sentinel URL: %v", where, args["redis"], err)
		} else if u.MasterName != master || !slices.Equal(sorted(u.SentinelAddrs), sentinels) || u.DB != 0 {
			t.Errorf("%s: --redis names primary %q, sentinels %q, db %d; want %q (configs.sentinel's monitor), %q, 0", where, u.MasterName, sorted(u.SentinelAddrs), u.DB, master, sentinels)
		}
		if value(args, flags, "log-format") != "json" {
			t.Errorf("%s: --log-format %s; want json", where, value(args, flags, "log-format"))
		}
		addr, metrics := value(args, flags, "addr"), value(args, flags, "metrics-addr")
		if addr != "0.0.0.0:"+mcpPort || metrics != "0.0.0.0:"+ops {
			t.Errorf("%s: --addr %s --metrics-addr %s; want 0.0.0.0:%s and 0.0.0.0:%s, the image's ports", where, addr, metrics, mcpPort, ops)
		}
		// Other replicas forward to the advertised URL: by default
		// http://HOSTNAME:PORT/PATH when listening on every interface.
		if adv := value(args, flags, "advertise-url"); adv != "" || s.Hostname != name {
			t.Errorf("%s: --advertise-url %q, hostname %q; want the default advertised URL with hostname %s, which the other replicas resolve", where, adv, s.Hostname, name)
		}
		published := false
		for _, pc := range s.Ports {
			published = published || fmt.Sprint(pc.Target) == mcpPort
		}
		if !published {
			t.Errorf("%s: ports %+v publish no port for the MCP port %s", where, s.Ports, mcpPort)
		}

		for k, v := range s.Environment {
			if strings.HasPrefix(k, "TIDEMARK_") && k != requeststate.EnvKeys {
				t.Errorf("%s: environment %s: tidemark serve reads no such variable; use its flag in command", where, k)
			}
			if k == requeststate.EnvKeys && (v == nil || *v != key) {
				t.Errorf("%s: $%s is %v; want the key ring compose was given", where, k, v)
			}
		}
		if _, ok := s.Environment[requeststate.EnvKeys]; !ok {
			t.Errorf("%s: no $%s: each replica would seal requestState with a key of its own", where, requeststate.EnvKeys)
		}

		hc := s.HealthCheck
		if hc == nil || len(hc.Test) < 3 || hc.Test[0] != "CMD" || hc.Test[1] != entrypoint(t, d) || hc.Test[2] != "ready" ||
			!slices.Contains(hc.Test, "--metrics-addr=127.0.0.1:"+ops) {
			var test []string
			if hc != nil {
				test = hc.Test
			}
			t.Errorf("%s: healthcheck test %q; want [CMD %s ready --metrics-addr=127.0.0.1:%s ...]", where, test, entrypoint(t, d), ops)
		}
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") {
			t.Errorf("%s: read_only %v, cap_drop %q; want a read-only root and no capabilities", where, s.ReadOnly, s.CapDrop)
		}
		for _, dep := range []string{"redis-primary", "redis-replica", "sentinel-1", "sentinel-2", "sentinel-3"} {
			if s.DependsOn[dep].Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: depends_on %s: %+v; want condition service_healthy", where, dep, s.DependsOn[dep])
			}
		}
		if s.StopGracePeriod == nil {
			t.Fatalf("%s: no stop_grace_period: docker stops it after 10 s, before its drain ends", where)
		}
		grace = time.Duration(*s.StopGracePeriod)
	}

	// One replica's command line, run against real sentinels: it starts,
	// its health check passes, and SIGTERM ends it within its
	// stop_grace_period.
	testenv.Need(t, testenv.RedisServer, testenv.RedisSentinel)
	ss := redistest.StartSentinels(t, redistest.Start(t, redistest.Options{AppendOnly: true}))
	args := slices.Clone(command)
	for i, a := range args {
		if strings.HasPrefix(a, "--redis=") {
			args[i] = "--redis=" + ss.URL()
		}
	}
	srv := startServe(t, bin, args, []string{requeststate.EnvKeys + "=" + key})
	srv.p.WaitFor(t, `"msg":"request state keys","source":"environment `+requeststate.EnvKeys+`"`, 5*time.Second)
	hc := slices.Clone(p.Services["tidemark-1"].HealthCheck.Test[2:])
	for i, a := range hc {
		if strings.HasPrefix(a, "--metrics-addr=") {
			hc[i] = "--metrics-addr=" + srv.adminAddr
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := exec.Command(bin, hc...).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the health check %q still fails 20 s after the start: %v\n%s", hc, err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if within := srv.stop(t); within > grace {
		t.Errorf("%s: stop_grace_period %v; the replica says it exits within %v of SIGTERM", composeFile, grace, within)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
