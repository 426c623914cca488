package check

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tidemark-mcp/tidemark/internal/redistest"
	"github.com/tidemark-mcp/tidemark/internal/testenv"
	"github.com/tidemark-mcp/tidemark/requeststate"
)

// kubernetesDir holds the manifests, from the repository's root.
const kubernetesDir = "deploy/kubernetes"

// manifests are the objects of deploy/kubernetes, one of each kind.
type manifests struct {
	deployment *appsv1.Deployment
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	secret     *corev1.Secret
}

// loadManifests decodes every .yaml file of deploy/kubernetes strictly
// (an unknown or duplicate field is an error) into the API type its
// apiVersion and kind name; each file holds one object, and each kind
// appears once.
func loadManifests(t testing.TB) *manifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), kubernetesDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("%s: no manifests (%v)", kubernetesDir, err)
	}
	m := &manifests{}
	for _, file := range files {
		name := filepath.Join(kubernetesDir, filepath.Base(file))
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if regexp.MustCompile(`(?m)^---`).Match(data) {
			t.Errorf("%s: one object per file", name)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(data, &tm); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var obj any
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			m.deployment = once(t, name, m.deployment)
			obj = m.deployment
		case "v1 Service":
			m.service = once(t, name, m.service)
			obj = m.service
		case "policy/v1 PodDisruptionBudget":
			m.pdb = once(t, name, m.pdb)
			obj = m.pdb
		case "v1 Secret":
			m.secret = once(t, name, m.secret)
			obj = m.secret
		default:
			t.Fatalf("%s: %s %s; want a Deployment (apps/v1), a Service, a Secret (v1) or a PodDisruptionBudget (policy/v1)", name, tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(data, obj); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if m.deployment == nil || m.service == nil || m.pdb == nil || m.secret == nil {
		t.Fatalf("%s: want a Deployment, a Service, a PodDisruptionBudget and a Secret", kubernetesDir)
	}
	return m
}

// once returns a new T, failing the test when have is already one: a
// second object of its kind.
func once[T any](t testing.TB, name string, have *T) *T {
	t.Helper()
	if have != nil {
		t.Fatalf("%s: a second %T; want one of each kind", name, have)
	}
	return new(T)
}

// selects reports whether the label selector sel matches the labels set.
func selects(t testing.TB, sel *metav1.LabelSelector, set map[string]string) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %+v: %v", sel, err)
	}
	return !s.Empty() && s.Matches(labels.Set(set))
}

// expand replaces each $(NAME) of s with env[NAME], as the kubelet expands
// a container's args, and reports the names env lacks (which the kubelet
// would leave as they are).
func expand(s string, env map[string]string) (string, []string) {
	var missing []string
	out := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`).ReplaceAllStringFunc(s, func(ref string) string {
		name := ref[2 : len(ref)-1]
		v, ok := env[name]
		if !ok {
			missing = append(missing, name)
			return ref
		}
		return v
	})
	return out, missing
}

// TestKubernetesManifests: deploy/kubernetes decodes strictly into the
// Kubernetes API types and describes a fleet of three replicas that the
// binary serves as described: its args are flags serve -h lists; it
// listens on the image's ports, the MCP one named mcp (the Service's
// target) and the operator's one named admin, where the readiness probe
// asks /readyz and the liveness probe /healthz; each replica advertises
// its pod IP; the Redis URL and the key ring come from the Secret, whose
// keys exist, and the Secret's example URL is a Sentinel URL and its
// example key ring is refused; the pods run as the image's non-root user
// on a read-only root; the Deployment's, the Service's and the
// PodDisruptionBudget's selectors match the pods, the budget keeping two
// of three. Then the container's args, expanded as the kubelet does, run
// against real sentinels: the probes' paths answer 200, the memory limit
// is above the runtime's soft limit, and the termination grace period
// holds the preStop sleep and the process's exit_within.
func TestKubernetesManifests(t *testing.T) {
	bin := imageBinary(t)
	flags := serveFlags(t, bin)
	d := parseDockerfile(t)
	ops := opsPort(t)
	mcpPort := port(t, "serve's default --addr", flags["addr"].def)
	m := loadManifests(t)
	dep, spec := m.deployment, &m.deployment.Spec.Template.Spec
	where := kubernetesDir + "/deployment.yaml"
	podLabels := m.deployment.Spec.Template.Labels

	if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 3 {
		t.Errorf("%s: replicas %v; want 3", where, dep.Spec.Replicas)
	}
	if !selects(t, dep.Spec.Selector, podLabels) {
		t.Errorf("%s: selector %+v does not match the pods' labels %v", where, dep.Spec.Selector, podLabels)
	}
	if ru := dep.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("%s: rollingUpdate %+v; want maxUnavailable 0, a new replica ready before an old one stops", where, ru)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers; want one", where, len(spec.Containers))
	}
	c := &spec.Containers[0]

	// The environment: the pod's IP, and the Secret's keys.
	secretKeys := map[string]bool{}
	for k := range m.secret.StringData {
		secretKeys[k] = true
	}
	for k := range m.secret.Data {
		secretKeys[k] = true
	}
	live := map[string]string{} // the values the live run gives each variable
	key := testKey()
	var podIP string // the variable that holds the pod's IP
	var redisFromSecret, keysFromSecret bool
	for _, e := range c.Env {
		if name, ok := strings.CutPrefix(e.Name, "TIDEMARK_"); ok && e.Name != requeststate.EnvKeys {
			if _, known := flags[strings.ToLower(strings.ReplaceAll(name, "_", "-"))]; !known {
				t.Errorf("%s: env %s: tidemark serve reads no such variable (TIDEMARK_<FLAG> of a flag serve -h lists)", where, e.Name)
			}
		}
		switch {
		case e.ValueFrom == nil:
			live[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP":
			podIP, live[e.Name] = e.Name, "127.0.0.1"
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != m.secret.Name || !secretKeys[ref.Key] {
				t.Errorf("%s: env %s from secret %s key %s; the Secret is %s with keys %v", where, e.Name, ref.Name, ref.Key, m.secret.Name, secretKeys)
			}
			switch ref.Key {
			case "redis-url":
				redisFromSecret = e.Name == "TIDEMARK_REDIS"
			case "request-state-keys":
				keysFromSecret = e.Name == requeststate.EnvKeys
				live[e.Name] = key
			}
		default:
			t.Errorf("%s: env %s: %+v; want a value, the pod's IP or a Secret's key", where, e.Name, e.ValueFrom)
		}
	}
	if !keysFromSecret {
		t.Errorf("%s: no $%s from the Secret's request-state-keys: each replica would seal requestState with a key of its own", where, requeststate.EnvKeys)
	}
	if u, err := goredis.ParseFailoverURL(m.secret.StringData["redis-url"]); err != nil || u.MasterName == "" || len(u.SentinelAddrs) != 3 {
		t.Errorf("%s/secret.yaml: redis-url %q (%v); want an example Sentinel URL naming three sentinels", kubernetesDir, m.secret.StringData["redis-url"], err)
	}
	if _, err := requeststate.ParseRing(m.secret.StringData["request-state-keys"]); err == nil {
		t.Errorf("%s/secret.yaml: the example request-state-keys is a valid key ring; want a placeholder that tidemark serve refuses", kubernetesDir)
	}

	// The args.
	if len(c.Args) == 0 || c.Args[0] != "serve" || len(c.Command) != 0 {
		t.Fatalf("%s: command %q args %q; want the image's ENTRYPOINT with args serve ...", where, c.Command, c.Args)
	}
	args := serveArgs(t, where, flags, c.Args[1:])
	// The Redis URL may hold its password: from the Secret into the
	// environment (docs/operation.md, "Secrets"), never into the args,
	// which any process of the node can read.
	if !redisFromSecret || args["redis"] != "" {
		t.Errorf("%s: --redis=%q; want no --redis in args and $TIDEMARK_REDIS from the Secret's redis-url", where, args["redis"])
	}
	addr, metrics := value(args, flags, "addr"), value(args, flags, "metrics-addr")
	if addr != "0.0.0.0:"+mcpPort || metrics != "0.0.0.0:"+ops {
		t.Errorf("%s: --addr %s --metrics-addr %s; want 0.0.0.0:%s and 0.0.0.0:%s, the image's ports", where, addr, metrics, mcpPort, ops)
	}
	if want := "http://$(" + podIP + "):" + mcpPort + value(args, flags, "path"); podIP == "" || args["advertise-url"] != want {
		t.Errorf("%s: --advertise-url=%q; want %s: other replicas reach a pod at its IP, not at its host name", where, args["advertise-url"], want)
	}
	if value(args, flags, "log-format") != "json" {
		t.Errorf("%s: --log-format %s; want json", where, value(args, flags, "log-format"))
	}

	// The ports and the probes.
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if fmt.Sprint(ports["mcp"]) != mcpPort || fmt.Sprint(ports["admin"]) != ops {
		t.Errorf("%s: ports %v; want mcp %s and admin %s", where, ports, mcpPort, ops)
	}
	probePort := func(p intstr.IntOrString) string {
		if p.Type == intstr.String {
			return fmt.Sprint(ports[p.StrVal])
		}
		return strconv.Itoa(p.IntValue())
	}
	for _, pr := range []struct {
		kind  string
		probe *corev1.Probe
		path  string
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.LivenessProbe, "/healthz"},
	} {
		if pr.probe == nil || pr.probe.HTTPGet == nil || pr.probe.HTTPGet.Path != pr.path || probePort(pr.probe.HTTPGet.Port) != ops ||
			(pr.probe.HTTPGet.Scheme != "" && pr.probe.HTTPGet.Scheme != corev1.URISchemeHTTP) {
			t.Errorf("%s: %s %+v; want GET %s on the operator's port %s", where, pr.kind, pr.probe, pr.path, ops)
		}
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Fatalf("%s: no preStop sleep: the pod would get SIGTERM before its endpoints are removed (the image has no shell to sleep in)", where)
	}
	preStop := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("%s: no terminationGracePeriodSeconds", where)
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second

	// The security contexts.
	psc, csc := spec.SecurityContext, c.SecurityContext
	uid := imageUser(t, d)
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != uid {
		t.Errorf("%s: pod securityContext %+v; want runAsNonRoot and runAsUser %d, the image's user", where, psc, uid)
	}
	if csc == nil || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem ||
		csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
		csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
		t.Errorf("%s: container securityContext %+v; want a read-only root, no privilege escalation, capabilities drop ALL", where, csc)
	}

	// The Service and the budget.
	svc := m.service
	if !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, podLabels) {
		t.Errorf("%s/service.yaml: selector %v does not match the pods' labels %v", kubernetesDir, svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString("mcp") {
		t.Errorf("%s/service.yaml: ports %+v; want one, targetPort mcp", kubernetesDir, svc.Spec.Ports)
	}
	pdb := m.pdb
	if !selects(t, pdb.Spec.Selector, podLabels) {
		t.Errorf("%s/pdb.yaml: selector %+v does not match the pods' labels %v", kubernetesDir, pdb.Spec.Selector, podLabels)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("%s/pdb.yaml: maxUnavailable %v minAvailable %v; want maxUnavailable 1", kubernetesDir, pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}

	// The container's args run as the kubelet runs them, on real sentinels.
	testenv.Need(t, testenv.RedisServer, testenv.RedisSentinel)
	ss := redistest.StartSentinels(t, redistest.Start(t, redistest.Options{AppendOnly: true}))
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == "redis-url" {
			live[e.Name] = ss.URL()
		}
	}
	var expanded, env []string
	for _, a := range c.Args {
		x, missing := expand(a, live)
		if len(missing) > 0 {
			t.Errorf("%s: arg %q names $(%s), which the container's env does not set", where, a, strings.Join(missing, ")$("))
		}
		expanded = append(expanded, x)
	}
	for k, v := range live {
		env = append(env, k+"="+v)
	}
	srv := startServe(t, bin, expanded, env)
	srv.awaitReady(t)
	if code, body := srv.get(t, c.ReadinessProbe.HTTPGet.Path); code != http.StatusOK || body["ready"] != true {
		t.Errorf("readinessProbe GET %s: %d %v; want 200 ready", c.ReadinessProbe.HTTPGet.Path, code, body)
	}
	if code, body := srv.get(t, c.LivenessProbe.HTTPGet.Path); code != http.StatusOK || body["status"] != "ok" {
		t.Errorf("livenessProbe GET %s: %d %v; want 200 ok", c.LivenessProbe.HTTPGet.Path, code, body)
	}
	if limit := c.Resources.Limits.Memory(); limit.Value() <= srv.memoryLimit {
		t.Errorf("%s: memory limit %v; want it above the %d-byte soft limit tidemark serve gives the Go runtime (memory_limit), or the pod is killed before the collector works harder", where, limit, srv.memoryLimit)
	}
	if within := srv.stop(t); grace < preStop+within {
		t.Errorf("%s: terminationGracePeriodSeconds %v; want at least the preStop sleep %v plus %v, the process's exit_within", where, grace, preStop, within)
	}
}
