package main

// InfluxQL as InfluxDB receives it from Grafana: the dashboard's macros and variables replaced
// the way Grafana replaces them for an InfluxDB datasource, then InfluxDB's own parser.

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/influxdata/influxql"
)

// A fixed one-hour range, as Grafana renders $timeFilter for InfluxDB (epoch milliseconds).
const timeFilter = "time >= 1700000000000ms and time <= 1700003600000ms"

// $name, ${name}, ${name:format} and [[name]], Grafana's three variable syntaxes.
var varRef = regexp.MustCompile(`\$([A-Za-z_][A-Za-z0-9_]*)|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// variableValues gives each dashboard variable the text Grafana would put in a query: the current
// value of custom, textbox, constant, interval and single-value query variables, and for query
// variables (multi-value, "All") a regex alternation of two escaped sample values, as Grafana formats them for InfluxDB.
func variableValues(vars []rawVariable) map[string]string {
	out := map[string]string{
		"timeFilter": timeFilter,
		"__interval": "10s", "__interval_ms": "10000",
		"__range": "3600s", "__range_s": "3600", "__range_ms": "3600000",
		"__from": "1700000000000", "__to": "1700003600000",
	}
	for _, v := range vars {
		// A single-value query variable (say the retention policy) takes its saved value.
		if v.Type == "query" && (v.Multi || v.IncludeAll) {
			out[v.Name] = `(wf\-a|wf\-b)`
			continue
		}
		var s string
		if json.Unmarshal(v.Current.Value, &s) == nil && s != "" && s != "$__all" {
			out[v.Name] = s
			continue
		}
		var list []string
		if json.Unmarshal(v.Current.Value, &list) == nil && len(list) > 0 && list[0] != "$__all" {
			out[v.Name] = list[0]
			continue
		}
		out[v.Name] = "wf"
	}
	return out
}

// substitute replaces every variable reference; an undefined one is an error (Grafana would send
// it to InfluxDB literally).
func substitute(q string, vars map[string]string) (string, error) {
	var missing []string
	out := varRef.ReplaceAllStringFunc(q, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, "$"+name)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("undefined variable(s) %s in %q", strings.Join(missing, ", "), q)
	}
	return out, nil
}

// parseInfluxQL substitutes and parses one query text (one or more statements).
func parseInfluxQL(q string, vars map[string]string) error {
	s, err := substitute(q, vars)
	if err != nil {
		return err
	}
	parsed, err := influxql.ParseQuery(s)
	if err != nil {
		return fmt.Errorf("influxql: %v in %q", err, s)
	}
	if len(parsed.Statements) == 0 {
		return fmt.Errorf("influxql: no statement in %q", s)
	}
	return nil
}
