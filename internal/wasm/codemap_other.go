//go:build !linux

package wasm

// Outside Linux machine code stays where wazero puts it: correct, only all
// of it resident (see codemap_linux.go).

type codeMapper struct{}

func newCodeMapper() *codeMapper { return &codeMapper{} }

func (*codeMapper) moved(string) ([]codeRegion, error) { return nil, nil }

func moveRegions(string, []codeRegion) ([]codeRegion, error) { return nil, nil }

func releaseRegions([]codeRegion) {}

func releaseOwnFileMappings() {}
