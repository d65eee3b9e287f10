module wattflip/tests/dashboards-check

go 1.24

require (
	github.com/grafana/grafana-foundation-sdk/go v0.0.22
	github.com/influxdata/influxql v1.1.0
)

require github.com/gogo/protobuf v1.3.2 // indirect
