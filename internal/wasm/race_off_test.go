//go:build !race

package wasm_test

const raceDetector = false
