// Package prometheus holds Tidemark's example Prometheus alerting rules
// (alerts.yml) and their promtool unit tests (alerts_test.yml); its Go
// test runs `promtool check rules` and `promtool test rules` on them. It
// has no Go API.
package prometheus
