package main

// The SDK side: the dashboard schema, every panel type's options and field config, and the
// dataquery types the SDK has (Prometheus, Loki, …) are parsed by the SDK's generated
// UnmarshalJSONStrict. The SDK v0.0.22 has no InfluxDB dataquery type, so one is registered here,
// mirroring the query model of Grafana's InfluxDB datasource (public/app/plugins/datasource/
// influxdb/types.ts, InfluxQuery, plus the common DataQuery fields): its strict decoder refuses
// unknown fields and wrong types like the generated ones do.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// influxQuery is one InfluxDB target as Grafana stores it.
type influxQuery struct {
	RefID         string            `json:"refId"`
	Hide          *bool             `json:"hide,omitempty"`
	Datasource    *json.RawMessage  `json:"datasource,omitempty"`
	QueryType     *string           `json:"queryType,omitempty"`
	Key           *string           `json:"key,omitempty"`
	IntervalMs    *float64          `json:"intervalMs,omitempty"`
	MaxDataPoints *float64          `json:"maxDataPoints,omitempty"`
	Policy        *string           `json:"policy,omitempty"`
	Measurement   *string           `json:"measurement,omitempty"`
	ResultFormat  *string           `json:"resultFormat,omitempty"`
	OrderByTime   *string           `json:"orderByTime,omitempty"`
	Tags          []json.RawMessage `json:"tags,omitempty"`
	GroupBy       []json.RawMessage `json:"groupBy,omitempty"`
	Select        []json.RawMessage `json:"select,omitempty"`
	Limit         *json.RawMessage  `json:"limit,omitempty"`
	Slimit        *json.RawMessage  `json:"slimit,omitempty"`
	Tz            *string           `json:"tz,omitempty"`
	Fill          *string           `json:"fill,omitempty"`
	RawQuery      *bool             `json:"rawQuery,omitempty"`
	Query         *string           `json:"query,omitempty"`
	Alias         *string           `json:"alias,omitempty"`
	MatchAny      *bool             `json:"matchAny,omitempty"`
}

func (q influxQuery) ImplementsDataqueryVariant() {}
func (q influxQuery) DataqueryType() string       { return "influxdb" }
func (q influxQuery) Validate() error             { return nil }
func (q influxQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(influxQuery)
	return ok && reflect.DeepEqual(q, o)
}

func strictInfluxQuery(raw []byte) (variants.Dataquery, error) {
	var q influxQuery
	if err := strictDecode(raw, &q); err != nil {
		return nil, err
	}
	if q.RefID == "" {
		return nil, fmt.Errorf("refId: required field is missing from input")
	}
	return q, nil
}

var register = sync.OnceFunc(func() {
	plugins.RegisterDefaultPlugins()
	cog.NewRuntime().RegisterDataqueryVariant(variants.DataqueryConfig{
		Identifier:                 "influxdb",
		DataqueryUnmarshaler:       strictInfluxQuery,
		StrictDataqueryUnmarshaler: strictInfluxQuery,
	})
})

// strictDashboard parses a dashboard with the SDK's strict decoder.
func strictDashboard(raw []byte) error {
	register()
	var d dashboard.Dashboard
	return noErr(d.UnmarshalJSONStrict(raw))
}

// noErr: the SDK returns an empty cog.BuildErrors (a non-nil error) when nothing failed.
func noErr(err error) error {
	if be, ok := err.(cog.BuildErrors); ok && len(be) == 0 {
		return nil
	}
	return err
}
