package main

// Mutated copies of the repository's own dashboards: each mutation must make the checker fail
// with a problem naming what is wrong, and the unmutated dashboards must pass.

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, name string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "dashboards", name))
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

func check(t *testing.T, d map[string]any) Report {
	t.Helper()
	raw, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	return CheckDashboard(raw)
}

func panel(d map[string]any, i int) map[string]any {
	return d["panels"].([]any)[i].(map[string]any)
}

func target(d map[string]any, i int) map[string]any {
	return panel(d, i)["targets"].([]any)[0].(map[string]any)
}

func TestRepositoryDashboardsPass(t *testing.T) {
	files, err := jsonFiles([]string{filepath.Join("..", "..", "dashboards")})
	if err != nil || len(files) < 5 {
		t.Fatalf("dashboards: %v %v", files, err)
	}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if rep := CheckDashboard(raw); len(rep.Problems) > 0 {
			t.Errorf("%s: %v", f, rep.Problems)
		}
	}
}

func TestMutationsFail(t *testing.T) {
	cases := []struct {
		name, file, want string
		mutate           func(d map[string]any)
	}{
		{"unknown top-level field", "fleet-overview.json", "unexpected field 'refreshh'",
			func(d map[string]any) { d["refreshh"] = "5s" }},
		{"unknown panel field", "power-budget.json", "unexpected field 'gridPosition'",
			func(d map[string]any) { panel(d, 0)["gridPosition"] = map[string]any{"x": 0} }},
		{"unknown field in a table panel's options", "power-budget.json", "unexpected field 'showHeaders'",
			func(d map[string]any) { panel(d, 2)["options"].(map[string]any)["showHeaders"] = true }},
		{"unknown field in an InfluxDB target", "throttling.json", `unknown field "rawquery"`,
			func(d map[string]any) { target(d, 0)["rawquery"] = true }},
		{"missing required panel type", "throttling.json", "discriminator field 'type' not found",
			func(d map[string]any) { delete(panel(d, 0), "type") }},
		{"missing required gridPos height", "fleet-overview.json", "gridPos.h: required field is missing",
			func(d map[string]any) { delete(panel(d, 0)["gridPos"].(map[string]any), "h") }},
		{"wrong type: title a number", "device-energy-profile.json", "title",
			func(d map[string]any) { d["title"] = 42 }},
		{"wrong type: panel id a string", "energy-proportionality.json", "id",
			func(d map[string]any) { panel(d, 1)["id"] = "one" }},
		{"InfluxQL syntax error", "fleet-overview.json", "influxql:",
			func(d map[string]any) {
				q := target(d, 1)["query"].(string)
				target(d, 1)["query"] = strings.Replace(q, "FROM", "FORM", 1)
			}},
		{"undefined variable", "throttling.json", "undefined variable(s) $hots",
			func(d map[string]any) {
				q := target(d, 0)["query"].(string)
				target(d, 0)["query"] = strings.Replace(q, "$host", "$hots", 1)
			}},
		{"InfluxDB target without raw query", "throttling.json", "without a raw query",
			func(d map[string]any) { delete(target(d, 0), "rawQuery") }},
		{"unknown field in legacy xychart options", "throttling.json", `unknown field "dimensions"`,
			func(d map[string]any) {
				for _, p := range d["panels"].([]any) {
					if p.(map[string]any)["type"] == "xychart" {
						p.(map[string]any)["options"].(map[string]any)["dimensions"] = 1
					}
				}
			}},
		{"broken legacy annotation query", "throttling.json", `annotation "Throttle events": influxql`,
			func(d map[string]any) {
				a := d["annotations"].(map[string]any)["list"].([]any)[0].(map[string]any)
				a["query"] = "SELECT FROM WHERE"
			}},
		{"variable query not InfluxQL", "power-budget.json", "variable host: influxql",
			func(d map[string]any) {
				for _, x := range d["templating"].(map[string]any)["list"].([]any) {
					if v := x.(map[string]any); v["name"] == "host" {
						v["query"] = "label_values(up, host)"
					}
				}
			}},
		{"resolution variable not InfluxQL", "throttling.json", "variable rp: influxql",
			func(d map[string]any) {
				v := d["templating"].(map[string]any)["list"].([]any)[0].(map[string]any)
				v["query"] = "SELECT last(\"rp\") FROM \"wattflip_resolution\" WHERE \"since_ms\" <= ${__from} AND"
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := load(t, c.file)
			c.mutate(d)
			rep := check(t, d)
			all := strings.Join(rep.Problems, "\n")
			if len(rep.Problems) == 0 || !strings.Contains(all, c.want) {
				t.Errorf("want a problem containing %q, got %q", c.want, all)
			}
		})
	}
}

// A Prometheus panel (another datasource) is strict-parsed by the SDK's prometheus dataquery
// type, and its PromQL is not handed to the InfluxQL parser.
func TestPrometheusTargets(t *testing.T) {
	d := load(t, "power-budget.json")
	p := panel(d, 0)
	prom := map[string]any{"type": "prometheus", "uid": "prom"}
	p["datasource"] = prom
	p["targets"] = []any{map[string]any{"refId": "A", "datasource": prom, "expr": "sum by (host) (wattflip_power_watts)"}}
	if rep := check(t, d); len(rep.Problems) > 0 {
		t.Fatalf("a valid PromQL target failed: %v", rep.Problems)
	}
	p["targets"].([]any)[0].(map[string]any)["exprr"] = "x"
	rep := check(t, d)
	if !strings.Contains(strings.Join(rep.Problems, "\n"), "exprr") {
		t.Fatalf("an unknown field in a Prometheus target passed: %v", rep.Problems)
	}
}
