package redis

import (
	"testing"
)

// TestParseEndpoint: the URL forms of the package documentation select
// go-redis's parser by their query: master_name makes a Sentinel URL, addr
// parameters without it a Cluster URL, anything else one server.
func TestParseEndpoint(t *testing.T) {
	for _, tc := range []struct {
		url, want string
		kind      topology
	}{
		{"redis://10.0.0.1:6379/2", "10.0.0.1:6379", topoSingle},
		{"redis://s1:26379/0?master_name=tm&addr=s2:26379&addr=s3:26379",
			`sentinels [s1:26379 s2:26379 s3:26379], master "tm"`, topoSentinel},
		{"redis://s1:26379?master_name=tm", `sentinels [s1:26379], master "tm"`, topoSentinel},
		{"redis://n1:7000?addr=n2:7001&addr=n3:7002", "cluster seeds [n1:7000 n2:7001 n3:7002]", topoCluster},
		{"redis://n1:7000?addr=n1:7000", "cluster seeds [n1:7000 n1:7000]", topoCluster},
	} {
		e, err := parseEndpoint(tc.url)
		if err != nil {
			t.Errorf("parseEndpoint(%q): %v", tc.url, err)
			continue
		}
		if e.kind != tc.kind || e.String() != tc.want {
			t.Errorf("parseEndpoint(%q) = kind %d %q, want kind %d %q", tc.url, e.kind, e.String(), tc.kind, tc.want)
		}
	}
	for _, bad := range []string{
		"http://h:1",                          // scheme
		"redis://s1:26379?master_name=tm&x=1", // unknown parameter (go-redis refuses)
		"redis://n1:7000?addr=n2:7001&x=1",
	} {
		if _, err := parseEndpoint(bad); err == nil {
			t.Errorf("parseEndpoint(%q) succeeded, want an error", bad)
		}
	}
}
