package main

// Two stored forms that Grafana migrates when it loads a dashboard and that the SDK's schema
// (the current model) no longer describes. Each is checked here against its own strict type
// (unknown fields and wrong types still fail), then removed from the copy the SDK parses, so the
// rest of the panel or annotation is still strict-parsed by the SDK:
//   - xychart options of the pre-11 panel (`seriesMapping`, `dims`; Grafana's xychart
//     migration handler turns them into `mapping` and `series`): legend and tooltip are parsed
//     with the SDK's common types;
//   - an InfluxDB annotation with its query at the top level (`query`, `textColumn`,
//     `tagsColumn`, `titleColumn`; Grafana's InfluxDB datasource moves them into `target`).
// A new legacy form is a new case here and a line in dashboards/README.md.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/common"
)

type legacyXYOptions struct {
	SeriesMapping string          `json:"seriesMapping"`
	Dims          *legacyXYDims   `json:"dims"`
	Series        []legacyXYSerie `json:"series,omitempty"`
	Legend        json.RawMessage `json:"legend"`
	Tooltip       json.RawMessage `json:"tooltip"`
}

type legacyXYDims struct {
	X       string   `json:"x"`
	Exclude []string `json:"exclude,omitempty"`
	Frame   *int     `json:"frame,omitempty"`
}

type legacyXYSerie struct {
	Name       *string         `json:"name,omitempty"`
	X          *string         `json:"x,omitempty"`
	Y          *string         `json:"y,omitempty"`
	PointColor json.RawMessage `json:"pointColor,omitempty"`
	PointSize  json.RawMessage `json:"pointSize,omitempty"`
}

type legacyAnnotationQuery struct {
	Query       string  `json:"query"`
	TextColumn  *string `json:"textColumn,omitempty"`
	TagsColumn  *string `json:"tagsColumn,omitempty"`
	TitleColumn *string `json:"titleColumn,omitempty"`
}

// strictDecode decodes a JSON object into the struct v refusing unknown fields. Go's decoder
// matches field names case-insensitively (`rawquery` would fill RawQuery) while Grafana's are
// case-sensitive, so the keys are first compared exactly with the struct's json tags.
func strictDecode(raw []byte, v any) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	known := map[string]bool{}
	t := reflect.TypeOf(v).Elem()
	for i := 0; i < t.NumField(); i++ {
		known[strings.Split(t.Field(i).Tag.Get("json"), ",")[0]] = true
	}
	var unknown []string
	for k := range fields {
		if !known[k] {
			unknown = append(unknown, fmt.Sprintf("unknown field %q", k))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return errors.New(strings.Join(unknown, ", "))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// stripLegacy checks the legacy forms in a dashboard and returns the dashboard without them, how
// many it found, and the problems in them.
func stripLegacy(raw []byte) ([]byte, int, []string) {
	var d map[string]any
	if err := json.Unmarshal(raw, &d); err != nil {
		return raw, 0, nil // the SDK parse reports it
	}
	n := 0
	var problems []string
	var panels func(ps []any)
	panels = func(ps []any) {
		for _, pv := range ps {
			p, ok := pv.(map[string]any)
			if !ok {
				continue
			}
			if nested, ok := p["panels"].([]any); ok {
				panels(nested)
			}
			opts, ok := p["options"].(map[string]any)
			if p["type"] != "xychart" || !ok || (opts["dims"] == nil && opts["seriesMapping"] == nil) {
				continue
			}
			n++
			if err := checkLegacyXY(opts); err != nil {
				problems = append(problems, fmt.Sprintf("xychart %q: legacy options: %v", p["title"], err))
			}
			delete(p, "options")
		}
	}
	if ps, ok := d["panels"].([]any); ok {
		panels(ps)
	}
	if ann, ok := d["annotations"].(map[string]any); ok {
		list, _ := ann["list"].([]any)
		for _, av := range list {
			a, ok := av.(map[string]any)
			if !ok || a["query"] == nil {
				continue
			}
			n++
			legacy := map[string]any{}
			for _, k := range []string{"query", "textColumn", "tagsColumn", "titleColumn"} {
				if v, ok := a[k]; ok {
					legacy[k] = v
					delete(a, k)
				}
			}
			b, _ := json.Marshal(legacy)
			var q legacyAnnotationQuery
			if err := strictDecode(b, &q); err != nil {
				problems = append(problems, fmt.Sprintf("annotation %q: legacy query: %v", a["name"], err))
			}
		}
	}
	out, err := json.Marshal(d)
	if err != nil {
		return raw, n, append(problems, err.Error())
	}
	return out, n, problems
}

func checkLegacyXY(opts map[string]any) error {
	b, err := json.Marshal(opts)
	if err != nil {
		return err
	}
	var o legacyXYOptions
	if err := strictDecode(b, &o); err != nil {
		return err
	}
	if o.Dims == nil || o.Dims.X == "" {
		return fmt.Errorf("dims.x: required field is missing from input")
	}
	if o.SeriesMapping != "auto" && o.SeriesMapping != "manual" {
		return fmt.Errorf("seriesMapping: %q is neither auto nor manual", o.SeriesMapping)
	}
	var legend common.VizLegendOptions
	if err := noErr(legend.UnmarshalJSONStrict(o.Legend)); err != nil {
		return fmt.Errorf("legend: %v", err)
	}
	var tooltip common.VizTooltipOptions
	if err := noErr(tooltip.UnmarshalJSONStrict(o.Tooltip)); err != nil {
		return fmt.Errorf("tooltip: %v", err)
	}
	return nil
}
