//go:build tools

// Package tools pins cmd/thanos in this wrapper module so `go mod tidy` records every module it
// needs in go.sum; build.sh then builds it with `go build` (never run as a program itself).
package tools

import _ "github.com/thanos-io/thanos/cmd/thanos"
