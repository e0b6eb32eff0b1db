package wasm

// WazeroCacheSubdir is the directory of a cache directory where wazero
// keeps its files.
var WazeroCacheSubdir = wazeroCacheSubdir
